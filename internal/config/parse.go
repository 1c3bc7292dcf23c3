package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"unicode"

	"keel/internal/suggest"
)

// Error is a value that does not parse, or a line that is not valid
// syntax. File and Line are empty for a value given to Set; Group and
// Option are empty when the line has none.
type Error struct {
	File   string
	Line   int
	Group  string
	Option string
	Msg    string
}

func (e *Error) Error() string { return where(e.File, e.Line, e.Group, e.Option) + e.Msg }

// Warning is an unknown group or option, an option keel does not use, or
// an option set twice. Parse returns warnings for the caller to log.
type Warning struct {
	File   string
	Line   int
	Group  string
	Option string
	Msg    string
}

func (w Warning) String() string { return where(w.File, w.Line, w.Group, w.Option) + w.Msg }

// where formats "FILE:LINE: [group] option: ".
func where(file string, line int, group, option string) string {
	var b strings.Builder
	if file != "" {
		b.WriteString(file)
		if line > 0 {
			fmt.Fprintf(&b, ":%d", line)
		}
		b.WriteString(": ")
	}
	switch {
	case group != "" && option != "":
		fmt.Fprintf(&b, "[%s] %s: ", group, option)
	case group != "":
		fmt.Fprintf(&b, "[%s]: ", group)
	case option != "":
		b.WriteString(option + ": ")
	}
	return b.String()
}

// Load reads and parses a configuration file. A missing file is an error
// that satisfies errors.Is(err, fs.ErrNotExist).
func Load(path string) (Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, nil, err
	}
	return Parse(path, data)
}

// Parse parses a configuration file's contents; name is the file name
// errors and warnings report. Options the file does not set keep their
// defaults. Every error in the file is reported: err is an *Error, or
// errors.Join of several (use errors.As). On error the Config is zero;
// the warnings are returned either way.
func Parse(name string, data []byte) (Config, []Warning, error) {
	cfg := Default()
	cfg.origins = map[optKey]Origin{}
	p := parser{file: name, cfg: &cfg, setAt: map[optKey]setAt{}, warned: map[string]bool{}}
	text := strings.TrimPrefix(string(data), "\uFEFF")
	for i, line := range strings.Split(text, "\n") {
		p.line(i+1, line)
	}
	switch len(p.errs) {
	case 0:
		return cfg, p.warns, nil
	case 1:
		return Config{}, p.warns, p.errs[0]
	}
	return Config{}, p.warns, errors.Join(p.errs...)
}

type parser struct {
	file  string
	cfg   *Config
	errs  []error
	warns []Warning

	started bool   // a group header has been seen (valid or not)
	group   string // the current group, normalised
	// read: the current group is one keel reads. When it is not, lines
	// are still checked for syntax but not interpreted.
	read   bool
	warned map[string]bool // groups already warned about
	setAt  map[optKey]setAt
}

// setAt is where an option was set, and under which name.
type setAt struct {
	line int
	key  optKey
}

func (p *parser) errorf(n int, group, option, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: n, Group: group, Option: option, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) warnf(n int, group, option, format string, args ...any) {
	p.warns = append(p.warns, Warning{File: p.file, Line: n, Group: group, Option: option, Msg: fmt.Sprintf(format, args...)})
}

// line handles one line, the way oslo.config's iniparser does.
func (p *parser) line(n int, line string) {
	line = strings.TrimRightFunc(line, unicode.IsSpace)
	switch {
	case line == "":
		return
	case line[0] == ' ' || line[0] == '\t':
		p.errorf(n, "", "", "indented line: oslo.config would read it as the continuation of the previous value, which keel does not support; remove the indentation")
	case line[0] == '[':
		p.header(n, line)
	case line[0] == '#' || line[0] == ';':
		return
	default:
		p.assignment(n, line)
	}
}

func (p *parser) header(n int, line string) {
	p.started, p.group, p.read = true, "", false
	if line[len(line)-1] != ']' {
		p.errorf(n, "", "", "group header %q does not end with ] (nothing may follow it, not even a comment)", line)
		return
	}
	if len(line) <= 2 {
		p.errorf(n, "", "", "empty group name")
		return
	}
	raw := line[1 : len(line)-1]
	g := normGroup(raw)
	p.group = g
	if groups[g] {
		p.read = true
		return
	}
	if p.warned[g] {
		return
	}
	p.warned[g] = true
	switch {
	case ignoredGroups[g]:
		p.warnf(n, g, "", "recognised Nova group, not used by keel; its options are ignored")
	case g == "default":
		p.warnf(n, g, "", "unknown group, its options are ignored; did you mean [DEFAULT]? (only DEFAULT is written in capitals)")
	case strings.TrimSpace(raw) != raw && (groups[normGroup(strings.TrimSpace(raw))] || ignoredGroups[normGroup(strings.TrimSpace(raw))]):
		p.warnf(n, g, "", "unknown group, its options are ignored; spaces inside the brackets are part of the name")
	default:
		p.warnf(n, g, "", "unknown group, its options are ignored")
	}
}

func (p *parser) assignment(n int, line string) {
	key, value, ok := splitAssignment(line)
	if !ok {
		p.errorf(n, p.group, "", "expected \"option = value\", a [group] header or a comment, got %q", line)
		return
	}
	if key == "" {
		p.errorf(n, p.group, "", "empty option name in %q", line)
		return
	}
	if !p.started {
		if !p.warned[""] {
			p.warned[""] = true
			p.errorf(n, "", key, "option outside any group; put it under [DEFAULT] or another [group]")
		}
		return
	}
	if !p.read {
		return
	}
	o := lookup(p.group, key)
	if o == nil {
		p.unknown(n, key)
		return
	}
	if err := o.set(p.cfg, value); err != nil {
		p.errorf(n, p.group, key, "%v", err)
		return
	}
	k := o.key()
	here := optKey{p.group, key}
	if prev, ok := p.setAt[k]; ok {
		if prev.key == here {
			p.warnf(n, p.group, key, "set again; this value replaces the one on line %d", prev.line)
		} else {
			p.warnf(n, p.group, key, "also set as [%s] %s on line %d (another name for the same option); this value replaces that one", prev.key.group, prev.key.name, prev.line)
		}
	}
	p.setAt[k] = setAt{line: n, key: here}
	p.cfg.origins[k] = Origin{File: p.file, Line: n}
}

// unknown warns about an option keel does not read in a group it reads.
func (p *parser) unknown(n int, key string) {
	if note, ok := ignoredOption(p.group, key); ok {
		msg := "recognised Nova option, not used by keel"
		if note != "" {
			msg += "; " + note
		}
		p.warnf(n, p.group, key, "%s", msg)
		return
	}
	p.warnf(n, p.group, key, "unknown option, ignored%s", hint(p.group, key))
}

// hint suggests what an unknown option may have meant.
func hint(group, name string) string {
	var elsewhere []string
	for _, o := range options {
		if o.name == name && o.group != group {
			elsewhere = append(elsewhere, "["+o.group+"]")
		}
		for _, a := range o.aliases {
			if a.name == name && a.group != group {
				elsewhere = append(elsewhere, "["+a.group+"]")
			}
		}
	}
	if len(elsewhere) > 0 {
		return "; keel reads " + name + " in " + strings.Join(elsewhere, " and ")
	}
	var inGroup []string
	for k := range byKey {
		if k.group == group {
			inGroup = append(inGroup, k.name)
		}
	}
	switch best := suggest.Closest(name, inGroup); {
	case best == "":
		return ""
	case suggest.Fold(best) == suggest.Fold(name):
		return "; did you mean " + best + "? (option names are case-sensitive)"
	default:
		return "; did you mean " + best + "?"
	}
}

// splitAssignment splits "key = value" or "key: value" at whichever of =
// and : comes first, trims both sides and removes one pair of matching
// quotes around the value, as oslo.config does.
func splitAssignment(line string) (key, value string, ok bool) {
	i := strings.IndexAny(line, "=:")
	if i < 0 {
		return "", "", false
	}
	key, value = strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
	if len(value) > 0 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		if len(value) == 1 {
			value = ""
		} else {
			value = value[1 : len(value)-1]
		}
	}
	return key, value, true
}

// Set sets one option from its text, parsed and checked as in a file (the
// value is trimmed; no quotes are removed): for flags, which override the
// file. Group and option are Nova's names (or another accepted name, such
// as [DEFAULT] state_path). An unknown option is an *Error here.
func (c *Config) Set(group, option, value string) error {
	g := normGroup(group)
	o := lookup(g, option)
	if o == nil {
		msg := "unknown option" + hint(g, option)
		if !groups[g] && !ignoredGroups[g] {
			msg = "unknown group"
		} else if note, ok := ignoredOption(g, option); ok || ignoredGroups[g] {
			msg = "recognised Nova option, not used by keel"
			if note != "" {
				msg += "; " + note
			}
		}
		return &Error{Group: group, Option: option, Msg: msg}
	}
	if err := o.set(c, strings.TrimSpace(value)); err != nil {
		return &Error{Group: g, Option: option, Msg: err.Error()}
	}
	c.origins = maps.Clone(c.origins)
	if c.origins == nil {
		c.origins = map[optKey]Origin{}
	}
	c.origins[o.key()] = Origin{Flag: true}
	return nil
}
