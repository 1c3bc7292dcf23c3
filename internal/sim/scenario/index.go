package scenario

import (
	"sort"
	"strconv"
	"strings"
)

// lineIndex maps key paths of a TOML text to the line they are written on.
// BurntSushi/toml reports positions only for syntax errors, so Parse scans
// the (already syntax-checked) text once more with this small lexer.
//
// Paths are written as in error messages: tables and keys joined by ".",
// array elements and arrays of tables by "[i]", keys that are not bare
// quoted: scheduler.host_subset_size, hosts[1].count, drain[0].hosts[1],
// hosts[0].instances."m1.small". An element of a multi-line array maps to its
// own line; a key inside an inline table maps to its own line too (which is
// the line of the table's key, inline tables being one line).
type lineIndex struct {
	lines map[string]int
}

// line returns the line of path or, when path itself is not written in the
// file (a missing key, a map entry), of its nearest written parent; 0 when
// nothing is.
func (ix *lineIndex) line(path string) int {
	if ix == nil {
		return 0
	}
	for path != "" {
		if l, ok := ix.lines[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// has reports whether path itself is written in the file.
func (ix *lineIndex) has(path string) bool {
	if ix == nil {
		return false
	}
	_, ok := ix.lines[path]
	return ok
}

// parentPath strips the last ".key" or "[i]" from path.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
		return ""
	}
	// Walk back over the last segment, which may be quoted and contain dots.
	if strings.HasSuffix(path, `"`) {
		for i := len(path) - 2; i >= 0; i-- {
			if path[i] == '"' && (i == 0 || path[i-1] != '\\') {
				if i == 0 {
					return ""
				}
				return strings.TrimSuffix(path[:i], ".")
			}
		}
		return ""
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// keyName renders one key as TOML writes it bare, or quoted when it must be.
func keyName(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(k)
		}
	}
	return k
}

// joinKey appends key k to path p.
func joinKey(p, k string) string {
	if p == "" {
		return keyName(k)
	}
	return p + "." + keyName(k)
}

// elem appends array index i to path p.
func elem(p string, i int) string { return p + "[" + strconv.Itoa(i) + "]" }

// stripIndices removes every "[i]" from path, giving the form
// toml.Key.String uses.
func stripIndices(path string) string {
	var b strings.Builder
	inQuote := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '"' && (i == 0 || path[i-1] != '\\'):
			inQuote = !inQuote
		case c == '[' && !inQuote:
			for i < len(path) && path[i] != ']' {
				i++
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// buildIndex scans src. It never fails: on text it does not understand it
// skips to the next line, so the worst case is a less precise line.
func buildIndex(src string) *lineIndex {
	s := &scanner{src: src, ix: &lineIndex{lines: map[string]int{}}, aot: map[string]int{}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			s.newlines = append(s.newlines, i)
		}
	}
	s.document()
	return s.ix
}

type scanner struct {
	src      string
	pos      int
	newlines []int // byte offsets of '\n'
	ix       *lineIndex
	aot      map[string]int // array-of-tables path → index of its last element
	table    string         // path of the current [table] / [[array]] element
}

func (s *scanner) lineAt(pos int) int {
	return sort.SearchInts(s.newlines, pos) + 1
}

func (s *scanner) record(path string, pos int) {
	if path == "" {
		return
	}
	if _, ok := s.ix.lines[path]; !ok {
		s.ix.lines[path] = s.lineAt(pos)
	}
}

func (s *scanner) eof() bool { return s.pos >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

// skipSpace skips blanks; with newlines, also line ends and comments.
func (s *scanner) skipSpace(newlines bool) {
	for !s.eof() {
		switch c := s.src[s.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
		case newlines && c == '\n':
			s.pos++
		case newlines && c == '#':
			s.skipLine()
		default:
			return
		}
	}
}

// skipLine moves past the next '\n'.
func (s *scanner) skipLine() {
	for !s.eof() && s.src[s.pos] != '\n' {
		s.pos++
	}
	if !s.eof() {
		s.pos++
	}
}

func (s *scanner) document() {
	for {
		s.skipSpace(true)
		if s.eof() {
			return
		}
		start := s.pos
		if s.peek() == '[' {
			s.header()
		} else {
			s.keyValue(s.table)
		}
		if s.pos == start { // not understood: do not loop forever
			s.skipLine()
			continue
		}
		// Rest of the line: blanks and a comment.
		s.skipSpace(false)
		if s.peek() == '#' || s.peek() == '\n' {
			s.skipLine()
		}
	}
}

// header reads "[a.b]" or "[[a.b]]" and makes it the current table.
func (s *scanner) header() {
	start := s.pos
	array := strings.HasPrefix(s.src[s.pos:], "[[")
	if array {
		s.pos += 2
	} else {
		s.pos++
	}
	keys := s.keyPath()
	s.skipSpace(false)
	if array {
		if strings.HasPrefix(s.src[s.pos:], "]]") {
			s.pos += 2
		}
	} else if s.peek() == ']' {
		s.pos++
	}
	if len(keys) == 0 {
		s.skipLine()
		return
	}
	path := ""
	for i, k := range keys {
		path = joinKey(path, k)
		last := i == len(keys)-1
		if last && array {
			s.record(path, start)
			n := 0
			if prev, ok := s.aot[path]; ok {
				n = prev + 1
			}
			s.aot[path] = n
			path = elem(path, n)
		} else if n, ok := s.aot[path]; ok {
			path = elem(path, n)
		}
		s.record(path, start)
	}
	s.table = path
}

// keyValue reads "k.k2 = value" relative to table.
func (s *scanner) keyValue(table string) {
	start := s.pos
	keys := s.keyPath()
	if len(keys) == 0 {
		return
	}
	path := table
	for _, k := range keys {
		path = joinKey(path, k)
		s.record(path, start)
	}
	s.skipSpace(false)
	if s.peek() != '=' {
		return
	}
	s.pos++
	s.skipSpace(false)
	s.value(path)
}

// keyPath reads dotted keys, bare or quoted.
func (s *scanner) keyPath() []string {
	var keys []string
	for {
		s.skipSpace(false)
		k, ok := s.key()
		if !ok {
			return keys
		}
		keys = append(keys, k)
		s.skipSpace(false)
		if s.peek() != '.' {
			return keys
		}
		s.pos++
	}
}

func (s *scanner) key() (string, bool) {
	switch c := s.peek(); {
	case c == '"':
		raw := s.basicString()
		k, err := strconv.Unquote(raw)
		if err != nil {
			k = strings.Trim(raw, `"`)
		}
		return k, true
	case c == '\'':
		raw := s.literalString()
		return strings.Trim(raw, "'"), true
	default:
		start := s.pos
		for !s.eof() {
			c := s.src[s.pos]
			if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
				s.pos++
				continue
			}
			break
		}
		return s.src[start:s.pos], s.pos > start
	}
}

// value reads one value of any kind, recording array elements and inline
// table keys under path.
func (s *scanner) value(path string) {
	rest := s.src[s.pos:]
	switch {
	case strings.HasPrefix(rest, `"""`):
		s.multiline(`"""`, true)
	case strings.HasPrefix(rest, `'''`):
		s.multiline(`'''`, false)
	case strings.HasPrefix(rest, `"`):
		s.basicString()
	case strings.HasPrefix(rest, `'`):
		s.literalString()
	case strings.HasPrefix(rest, `[`):
		s.pos++
		for i := 0; ; i++ {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			if s.peek() == ']' {
				s.pos++
				return
			}
			start := s.pos
			s.record(elem(path, i), start)
			s.value(elem(path, i))
			s.skipSpace(true)
			if s.peek() == ',' {
				s.pos++
			}
			if s.pos == start {
				return
			}
		}
	case strings.HasPrefix(rest, `{`):
		s.pos++
		for {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			if s.peek() == '}' {
				s.pos++
				return
			}
			start := s.pos
			s.keyValue(path)
			s.skipSpace(true)
			if s.peek() == ',' {
				s.pos++
			}
			if s.pos == start {
				return
			}
		}
	default:
		s.scalar()
	}
}

// scalar reads a number, boolean or date-time.
func (s *scanner) scalar() {
	start := s.pos
	for !s.eof() {
		switch s.src[s.pos] {
		case ',', ']', '}', '#', '\n', '\r', '\t':
			return
		case ' ':
			// "1979-05-27 07:32:00": a date and a time separated by a blank.
			tok := s.src[start:s.pos]
			if len(tok) == 10 && tok[4] == '-' && s.pos+1 < len(s.src) && s.src[s.pos+1] >= '0' && s.src[s.pos+1] <= '9' {
				s.pos++
				continue
			}
			return
		}
		s.pos++
	}
}

func (s *scanner) basicString() string {
	start := s.pos
	s.pos++ // opening quote
	for !s.eof() {
		switch s.src[s.pos] {
		case '\\':
			s.pos += 2
			continue
		case '"':
			s.pos++
			return s.src[start:s.pos]
		case '\n':
			return s.src[start:s.pos]
		}
		s.pos++
	}
	if s.pos > len(s.src) {
		s.pos = len(s.src)
	}
	return s.src[start:s.pos]
}

func (s *scanner) literalString() string {
	start := s.pos
	s.pos++
	for !s.eof() {
		switch s.src[s.pos] {
		case '\'':
			s.pos++
			return s.src[start:s.pos]
		case '\n':
			return s.src[start:s.pos]
		}
		s.pos++
	}
	return s.src[start:s.pos]
}

func (s *scanner) multiline(delim string, escapes bool) {
	s.pos += 3
	for !s.eof() {
		if escapes && s.src[s.pos] == '\\' {
			s.pos += 2
			continue
		}
		if strings.HasPrefix(s.src[s.pos:], delim) {
			s.pos += 3
			// Up to two more quotes belong to the content: """a"""""
			for i := 0; i < 2 && !s.eof() && s.src[s.pos] == delim[0]; i++ {
				s.pos++
			}
			return
		}
		s.pos++
	}
	if s.pos > len(s.src) {
		s.pos = len(s.src)
	}
}
