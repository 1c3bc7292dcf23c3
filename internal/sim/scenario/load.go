package scenario

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"keel/internal/scheduler"
	"keel/internal/suggest"
)

// Error is a refused scenario file: FILE:LINE: REASON. Line is 0 when the
// problem has no line of its own (a required key missing from the top
// level); Error() then prints FILE: REASON.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	file := e.File
	if file == "" {
		file = "scenario"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", file, e.Msg)
}

// Load reads, checks and completes the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes a scenario from data; name is the file name used in errors
// and, without directory and extension, the scenario's default Name. Every
// unknown key, wrongly typed value and invalid value is refused with an
// *Error naming the line. The returned scenario has its defaults applied.
func Parse(name string, data []byte) (*Scenario, error) {
	text := string(data)

	// 0. Encoding. The TOML decoder skips a UTF-16 byte-order mark and
	// reads on as UTF-8, so a file holding only the mark would read as an
	// empty file ("duration: missing"): say what it is instead.
	for _, bom := range []string{"\xff\xfe", "\xfe\xff"} {
		if strings.HasPrefix(text, bom) {
			return nil, &Error{File: name, Msg: fmt.Sprintf("the file starts with a UTF-16 byte-order mark (% X): a scenario file is UTF-8 text; save it as UTF-8", bom)}
		}
	}

	// 1. Syntax, into a generic tree.
	var raw map[string]any
	if _, err := toml.Decode(text, &raw); err != nil {
		return nil, syntaxError(name, err)
	}

	// 2. Keys and types, against the struct, with exact lines; the
	// filters' and weighers' options against the scheduler's registry.
	ix := buildIndex(text)
	if e := checkTree(name, ix, raw); e != nil {
		return nil, e
	}
	opts := schedulerOptions(raw)

	// 3. The real decode. The tree check above should have caught anything
	// it could refuse; Undecoded is the backstop for unknown keys.
	var s Scenario
	md, err := toml.Decode(text, &s)
	if err != nil {
		return nil, syntaxError(name, err)
	}
	for _, k := range md.Undecoded() {
		if len(k) == 2 && k[0] == "scheduler" && opts != nil {
			if _, ok := opts[k[1]]; ok {
				continue // decoded from the tree above
			}
		}
		return nil, &Error{File: name, Line: ix.lineOfKey(k.String()), Msg: k.String() + ": unknown key"}
	}
	s.Scheduler.Options = opts

	// 4. Values.
	if e := s.validate(name, ix); e != nil {
		return nil, e
	}
	if s.Name == "" {
		base := filepath.Base(name)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	s.ApplyDefaults()
	return &s, nil
}

// schedulerOptions returns the filters' and weighers' options (the
// scheduler registry's) the tree's [scheduler] table sets, already checked
// by checkTree; nil when it sets none.
func schedulerOptions(raw map[string]any) map[string]float64 {
	sched, _ := raw["scheduler"].(map[string]any)
	var opts map[string]float64
	for k, v := range sched {
		if _, ok := scheduler.LookupOption(k); !ok {
			continue
		}
		if opts == nil {
			opts = map[string]float64{}
		}
		switch x := v.(type) {
		case int64:
			opts[k] = float64(x)
		case float64:
			opts[k] = x
		}
	}
	return opts
}

// syntaxError converts a decoder error.
func syntaxError(file string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line := pe.Position.Line
		if line == 0 {
			line = pe.Line
		}
		return &Error{File: file, Line: line, Msg: "invalid TOML: " + pe.Message}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// lineOfKey finds the first line of a toml.Key (written without array
// indices).
func (ix *lineIndex) lineOfKey(k string) int {
	best := 0
	for p, l := range ix.lines {
		if stripIndices(p) == k && (best == 0 || l < best) {
			best = l
		}
	}
	return best
}

// checkTree walks the decoded tree against the Scenario type and returns the
// earliest (by line) unknown key or wrongly typed value.
func checkTree(file string, ix *lineIndex, raw map[string]any) *Error {
	var errs []*Error
	report := func(path, format string, args ...any) {
		errs = append(errs, &Error{File: file, Line: ix.line(path), Msg: path + ": " + fmt.Sprintf(format, args...)})
	}
	checkValue(raw, reflect.TypeFor[Scenario](), "", report)
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return errs[0]
}

type reportFunc func(path, format string, args ...any)

func checkValue(v any, t reflect.Type, path string, report reportFunc) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			report(path, "want a table, got %s", describe(v))
			return
		}
		fields := tomlFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			p := joinKey(path, k)
			f, ok := fields[k]
			if !ok {
				report(p, "unknown key%s", didYouMean(k, fields))
				continue
			}
			checkValue(m[k], f, p, report)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			report(path, "want a table (name = value, …), got %s", describe(v))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			checkValue(m[k], t.Elem(), joinKey(path, k), report)
		}
	case reflect.Slice:
		rv := reflect.ValueOf(v)
		if v == nil || rv.Kind() != reflect.Slice {
			if t.Elem().Kind() == reflect.Struct {
				report(path, "want an array of tables ([[%s]] sections), got %s", path, describe(v))
			} else {
				report(path, "want an array, got %s", describe(v))
			}
			return
		}
		for i := 0; i < rv.Len(); i++ {
			checkValue(rv.Index(i).Interface(), t.Elem(), elem(path, i), report)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			report(path, "want a string, got %s", describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			report(path, "want true or false, got %s", describe(v))
		}
	case reflect.Int, reflect.Int64:
		if _, ok := v.(int64); !ok {
			report(path, "want an integer, got %s", describe(v))
		}
	case reflect.Float64:
		switch x := v.(type) {
		case int64:
			if x > 1<<53-1 || x < -(1<<53-1) {
				report(path, "%d is too large", x)
			}
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				report(path, "want a finite number, got %v", x)
			}
		default:
			report(path, "want a number, got %s", describe(v))
		}
	default:
		report(path, "cannot be set from a file (%s)", t)
	}
}

// describe names a decoded TOML value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("the string %q", x)
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case float64:
		n := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(n, ".eIN") {
			n += ".0" // 4.0 is written "4.0", not "4": it is not an integer
		}
		return "the number " + n
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// tomlFields maps a struct type's TOML key names to field types. The
// [scheduler] table also has a key per option of the scheduler's registry
// (Scheduler.Options): a number, or a whole one for a limit.
func tomlFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	if t == reflect.TypeFor[Scheduler]() {
		for _, o := range append(scheduler.WeigherOptions(), scheduler.FilterOptions()...) {
			out[o.Name] = reflect.TypeFor[float64]()
			if o.Integer {
				out[o.Name] = reflect.TypeFor[int64]()
			}
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// didYouMean proposes the known key closest to an unknown one.
func didYouMean(k string, fields map[string]reflect.Type) string {
	best := suggest.Closest(k, slices.Collect(maps.Keys(fields)))
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}
