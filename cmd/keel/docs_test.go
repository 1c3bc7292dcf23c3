package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"keel/internal/client/clienttest"
)

// docsTestMarker, on the line before a ```sh block of README.md or
// docs/*.md, makes TestDocsShellBlocks run the block.
const docsTestMarker = "<!-- docs-test: keel -->"

// shellBlock is one marked block: where it is and its command lines.
type shellBlock struct {
	where string // file:line of the fence
	lines []string
}

// markedBlocks returns the marked shell blocks of the README and the docs
// pages, reading from the repository root root.
func markedBlocks(t *testing.T, root string) []shellBlock {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	var out []shellBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		rel, _ := filepath.Rel(root, f)
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != docsTestMarker {
				continue
			}
			if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
				t.Fatalf("%s:%d: %s must be followed by a ```sh block", rel, i+1, docsTestMarker)
			}
			b := shellBlock{where: rel + ":" + strconv.Itoa(i+2)}
			for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				b.lines = append(b.lines, lines[i])
			}
			out = append(out, b)
		}
	}
	return out
}

// keelArgs turns one line of a marked block into the keel command's
// arguments: the comment cut, `go run ./cmd/keel` or `keel` dropped, the
// words split at blanks (the blocks use no quoting). skip is set for a
// line the in-process cloud stands for (keel dev, and pointing the client
// at its clouds.yaml); an error names a line the test cannot run.
func keelArgs(line string) (args []string, skip bool, ok bool) {
	if i := strings.Index(line, "#"); i >= 0 {
		line = line[:i]
	}
	words := strings.Fields(line)
	switch {
	case len(words) == 0:
		return nil, true, true
	case words[0] == "export":
		for _, w := range words[1:] {
			name, _, _ := strings.Cut(w, "=")
			if name != "OS_CLIENT_CONFIG_FILE" && name != "OS_CLOUD" {
				return nil, false, false
			}
		}
		return nil, true, true
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/keel":
		words = words[3:]
	case words[0] == "keel":
		words = words[1:]
	default:
		return nil, false, false
	}
	if len(words) > 0 && words[0] == "dev" {
		return nil, true, true
	}
	return words, false, true
}

func TestKeelArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line     string
		want     string
		skip, ok bool
	}{
		{"go run ./cmd/keel host list   # bars", "host list", false, true},
		{"keel server create web1 --flavor m1.small --wait", "server create web1 --flavor m1.small --wait", false, true},
		{"export OS_CLIENT_CONFIG_FILE=$PWD/.keel/clouds.yaml", "", true, true},
		{"go run ./cmd/keel dev --hosts 3", "", true, true},
		{"", "", true, true},
		{"openstack server list", "", false, false},
		{"export PATH=/tmp", "", false, false},
	} {
		args, skip, ok := keelArgs(tc.line)
		if got := strings.Join(args, " "); got != tc.want || skip != tc.skip || ok != tc.ok {
			t.Errorf("keelArgs(%q) = %q, skip %v, ok %v; want %q, %v, %v", tc.line, got, skip, ok, tc.want, tc.skip, tc.ok)
		}
	}
}

// TestDocsShellBlocks runs every marked shell block of the README and the
// docs, in order, against an in-process keel dev (a server and three
// fake-driver agents): each keel command must succeed, so the tour and the
// getting-started commands stay true. A line that is no keel command
// fails the test: mark only blocks it can run.
func TestDocsShellBlocks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	blocks := markedBlocks(t, root)
	if len(blocks) < 2 {
		t.Fatalf("found %d marked blocks; the README's tour and getting-started's commands are marked", len(blocks))
	}
	for _, b := range blocks {
		t.Run(b.where, func(t *testing.T) {
			t.Parallel()
			cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
			useCloud(t, cloud)
			chdir(t, root) // the blocks name files from the repository root
			ran := 0
			for _, line := range b.lines {
				args, skip, ok := keelArgs(line)
				if !ok {
					t.Fatalf("%s: cannot run %q: a marked block holds only keel commands", b.where, line)
				}
				if skip {
					continue
				}
				out, err := run(t, args...)
				if err != nil {
					t.Fatalf("%s: keel %s: %v\noutput:\n%s", b.where, strings.Join(args, " "), err, out)
				}
				if strings.TrimSpace(out) == "" {
					t.Errorf("%s: keel %s printed nothing", b.where, strings.Join(args, " "))
				}
				ran++
			}
			if ran == 0 {
				t.Fatalf("%s: no keel command in the block", b.where)
			}
		})
	}
}

// TestReadmeFigureIsCurrent runs the command the README's figure shows
// (the first "$ go run ./cmd/keel …" line of a plain block) and checks
// that every line of the figure begins a line of what it prints now,
// spacing aside; a line ending in "…" is cut there.
func TestReadmeFigureIsCurrent(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "$ go run ./cmd/keel "
	_, rest, ok := strings.Cut(string(data), "```\n"+prompt)
	if !ok {
		t.Fatal("README.md has no figure block starting with " + prompt)
	}
	block, _, _ := strings.Cut(rest, "```")
	lines := strings.Split(block, "\n")
	args := strings.Fields(lines[0])
	chdir(t, root)
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("keel %s: %v", lines[0], err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var got []string
	for _, l := range strings.Split(out, "\n") {
		got = append(got, norm(l))
	}
	checked := 0
	for _, l := range lines[1:] {
		want := norm(strings.TrimSuffix(strings.TrimSpace(l), "…"))
		if want == "" {
			continue
		}
		checked++
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want) }) {
			t.Errorf("README's figure line %q is not what keel %s prints now:\n%s", want, lines[0], out)
		}
	}
	if checked < 3 {
		t.Errorf("the figure has %d lines; expected the policies' rows", checked)
	}
}
