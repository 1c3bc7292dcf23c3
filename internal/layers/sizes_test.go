package layers_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The sizes past which a part of keel is too big to read as one (issue
// 25): a type with more methods is split by role, a function with more
// lines is split into steps.
const (
	maxMethods   = 80
	maxFuncLines = 140
)

// sizeExceptions are the known offenders, each with its size now (methods
// of a type, lines of a function). The list only shrinks: the test fails
// when an offender grows, when it shrinks without its size here being
// lowered, and when it is back within the limit and its entry is still
// here. A new offender is split, not added.
var sizeExceptions = map[string]int{}

// TestNoTypeOrFunctionTooBig parses every non-test Go file of the module
// and fails on a type with more than maxMethods methods or a function
// (or method) of more than maxFuncLines lines, naming each with its
// file:line, unless sizeExceptions lists it at exactly its size.
func TestNoTypeOrFunctionTooBig(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sizes, files, err := measure(root)
	if err != nil {
		t.Fatal(err)
	}
	if files < 300 {
		t.Fatalf("parsed %d files; expected keel's 400 or so (is the walk rooted at the module?)", files)
	}
	for _, name := range slices.Sorted(maps.Keys(sizes)) {
		s := sizes[name]
		known, excepted := sizeExceptions[name]
		switch {
		case s.n <= s.limit && excepted:
			t.Errorf("%s: %s has %d %s now, within the limit of %d: delete its entry from sizeExceptions in internal/layers/sizes_test.go",
				s.pos, name, s.n, s.unit, s.limit)
		case s.n <= s.limit:
		case !excepted:
			t.Errorf("%s: %s has %d %s, more than %d: %s (do not add it to sizeExceptions)",
				s.pos, name, s.n, s.unit, s.limit, s.advice)
		case s.n > known:
			t.Errorf("%s: %s grew to %d %s (sizeExceptions allows it %d, the limit is %d): %s",
				s.pos, name, s.n, s.unit, known, s.limit, s.advice)
		case s.n < known:
			t.Errorf("%s: %s shrank to %d %s: lower its size in sizeExceptions in internal/layers/sizes_test.go from %d to %d, so that it cannot grow back",
				s.pos, name, s.n, s.unit, known, s.n)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sizeExceptions)) {
		if _, ok := sizes[name]; !ok {
			t.Errorf("sizeExceptions lists %s, which no longer exists: delete its entry in internal/layers/sizes_test.go", name)
		}
	}
}

// size is one type's method count or one function's length.
type size struct {
	n, limit int
	unit     string
	pos      string // file:line, relative to the module
	advice   string
}

// measure parses the non-test Go files under root (not testdata nor
// directories named . or _ anything) and returns every type's method
// count and every function's length by name — a type as dir.Type, a
// function as dir.Func or dir.Type.Method — and how many files it parsed.
func measure(root string) (map[string]size, int, error) {
	fset := token.NewFileSet()
	sizes := map[string]size{}
	typePos := map[string]string{} // dir.Type → where it is declared
	files := 0
	rel := func(p token.Pos) string {
		pos := fset.Position(p)
		r, err := filepath.Rel(root, pos.Filename)
		if err != nil {
			r = pos.Filename
		}
		return fmt.Sprintf("%s:%d", filepath.ToSlash(r), pos.Line)
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						typePos[dir+"."+ts.Name.Name] = rel(ts.Pos())
					}
				}
			case *ast.FuncDecl:
				if decl.Body == nil {
					continue
				}
				name := dir + "." + decl.Name.Name
				if recv := receiver(decl); recv != "" {
					name = dir + "." + recv + "." + decl.Name.Name
					typ := dir + "." + recv
					s := sizes[typ]
					if s.n == 0 {
						s = size{limit: maxMethods, unit: "methods", pos: rel(decl.Pos()),
							advice: "split it by role into types that each implement a few of its roles (as internal/store/memory's Placement and Records)"}
					}
					s.n++
					sizes[typ] = s
				}
				lines := fset.Position(decl.End()).Line - fset.Position(decl.Pos()).Line + 1
				sizes[name] = size{n: lines, limit: maxFuncLines, unit: "lines", pos: rel(decl.Pos()),
					advice: "split it into steps, each a function named for what it does"}
			}
		}
		return nil
	})
	for typ, pos := range typePos {
		if s, ok := sizes[typ]; ok {
			s.pos = pos
			sizes[typ] = s
		}
	}
	return sizes, files, err
}

// receiver is the name of the type decl is a method of ("" for a
// function), without a pointer or type parameters.
func receiver(decl *ast.FuncDecl) string {
	if decl.Recv == nil || len(decl.Recv.List) == 0 {
		return ""
	}
	t := decl.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
