package placementapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// This file checks request bodies against the forms Placement's JSON
// schemas give them, and refuses one that does not fit with the message
// Placement's validator (python-jsonschema) gives the error it reports
// first: of all the errors, the one nearest the top of the body, a
// type error before others there, and then the first found, keywords
// being checked in the order Placement's schema lists them.

// schema is one JSON schema, with only the keywords Placement uses.
type schema struct {
	// order lists the keywords in the order Placement's schema does.
	order      []string
	types      []string
	props      []namedSchema
	patterns   []namedSchema // patternProperties, matched with a search as Python's re.search does
	noExtra    bool          // additionalProperties: false
	required   []string
	minProps   int // -1: none
	minLen     int // -1: none
	maxLen     int // -1: none
	pattern    string
	minimum    string // a number as Placement's schema writes it, "" for none
	maximum    string
	items      *schema
	minItems   int // -1: none
	unique     bool
	formatUUID bool
	anyOf      []*schema
}

type namedSchema struct {
	name string
	s    *schema
	re   *regexp.Regexp
}

// object is an object schema: props in pairs (name, *schema), keywords
// in the order given.
func object(order string, props ...any) *schema {
	s := newSchema(order)
	s.types = []string{"object"}
	for i := 0; i+1 < len(props); i += 2 {
		s.props = append(s.props, namedSchema{name: props[i].(string), s: props[i+1].(*schema)})
	}
	return s
}

func newSchema(order string) *schema {
	return &schema{order: strings.Split(order, ","), minProps: -1, minLen: -1, maxLen: -1, minItems: -1}
}

func (s *schema) with(f func(*schema)) *schema { f(s); return s }

func (s *schema) patternProp(pattern string, sub *schema) *schema {
	s.patterns = append(s.patterns, namedSchema{name: pattern, s: sub, re: compiled(pattern)})
	return s
}

// regexps holds every pattern a schema names, compiled once.
var regexps sync.Map // string → *regexp.Regexp

func compiled(pattern string) *regexp.Regexp {
	if re, ok := regexps.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(pattern)
	regexps.Store(pattern, re)
	return re
}

// byMinor builds a schema for every microversion once, at start.
func byMinor(build func(minor int) *schema) [MaxMinor + 1]*schema {
	var out [MaxMinor + 1]*schema
	for m := range out {
		out[m] = build(m)
	}
	return out
}

// The schemas by microversion (minor clamped to 0–MaxMinor by the
// negotiation before any handler runs).
var (
	putAllocationSchemas  = byMinor(func(m int) *schema { return allocationSchema(m, false) })
	postAllocationSchemas = byMinor(func(m int) *schema { return postAllocationsSchema(m, 1) })
	reshaperSchemas       = byMinor(reshaperSchema)
	usagesSchemas         = byMinor(usagesSchema)
	candidatesSchemas     = byMinor(candidatesSchema)
)

// clone copies s deeply enough for a later version's schema to add to
// it (the sub-schemas it names are shared, not copied).
func (s *schema) clone() *schema {
	c := *s
	c.order = slices.Clone(s.order)
	c.props = slices.Clone(s.props)
	c.patterns = slices.Clone(s.patterns)
	c.required = slices.Clone(s.required)
	return &c
}

// prop returns the schema of property name.
func (s *schema) prop(name string) *schema {
	for _, p := range s.props {
		if p.name == name {
			return p.s
		}
	}
	return nil
}

// withProp returns a copy of s with property name added (or replaced).
func (s *schema) withProp(name string, sub *schema, required bool) *schema {
	c := s.clone()
	for i, p := range c.props {
		if p.name == name {
			c.props[i].s = sub
			goto req
		}
	}
	c.props = append(c.props, namedSchema{name: name, s: sub})
req:
	if required && !slices.Contains(c.required, name) {
		c.required = append(c.required, name)
	}
	return c
}

func typed(t ...string) *schema { s := newSchema("type"); s.types = t; return s }

// integer is {"type": "integer"} bounded by min and max ("" for none).
func integer(min, max string) *schema {
	s := newSchema("type,maximum,minimum")
	s.types, s.minimum, s.maximum = []string{"integer"}, min, max
	return s
}

// str is a string of length lo–hi (-1: unbounded) matching pattern ("":
// any).
func str(lo, hi int, pattern string) *schema {
	s := newSchema("type,pattern,minLength,maxLength")
	s.types, s.minLen, s.maxLen, s.pattern = []string{"string"}, lo, hi, pattern
	return s
}

func uuidString() *schema {
	s := newSchema("type,format")
	s.types, s.formatUUID = []string{"string"}, true
	return s
}

// jsonNode is a decoded JSON value that keeps the order of an object's
// keys (Python's dicts do, and the validator's messages follow it).
type jsonNode struct {
	kind string // object, array, string, number, boolean, null
	keys []string
	obj  map[string]*jsonNode
	arr  []*jsonNode
	str  string
	num  json.Number
	b    bool
}

func parseJSONNode(data []byte) (*jsonNode, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, err := readNode(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, fmt.Errorf("extra data after the JSON value")
	}
	return n, nil
}

func readNode(d *json.Decoder) (*jsonNode, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch v := t.(type) {
	case json.Delim:
		switch v {
		case '{':
			n := &jsonNode{kind: "object", obj: map[string]*jsonNode{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				child, err := readNode(d)
				if err != nil {
					return nil, err
				}
				if _, dup := n.obj[k]; !dup {
					n.keys = append(n.keys, k)
				}
				n.obj[k] = child
			}
			_, err := d.Token()
			return n, err
		case '[':
			n := &jsonNode{kind: "array"}
			for d.More() {
				child, err := readNode(d)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, child)
			}
			_, err := d.Token()
			return n, err
		}
		return nil, fmt.Errorf("unexpected %v", v)
	case string:
		return &jsonNode{kind: "string", str: v}, nil
	case json.Number:
		return &jsonNode{kind: "number", num: v}, nil
	case bool:
		return &jsonNode{kind: "boolean", b: v}, nil
	case nil:
		return &jsonNode{kind: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// is reports whether n is of JSON schema type t.
func (n *jsonNode) is(t string) bool {
	switch t {
	case "integer":
		if n.kind != "number" {
			return false
		}
		if _, err := n.num.Int64(); err == nil {
			return true
		}
		f, err := n.num.Float64()
		return err == nil && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "number":
		return n.kind == "number"
	}
	return n.kind == t
}

// repr renders n as Python's repr renders the value json.loads makes of
// it.
func (n *jsonNode) repr() string {
	switch n.kind {
	case "object":
		parts := make([]string, 0, len(n.keys))
		for _, k := range n.keys {
			parts = append(parts, pyStr(k)+": "+n.obj[k].repr())
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case "array":
		parts := make([]string, 0, len(n.arr))
		for _, e := range n.arr {
			parts = append(parts, e.repr())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case "string":
		return pyStr(n.str)
	case "number":
		return pyNumber(string(n.num))
	case "boolean":
		if n.b {
			return "True"
		}
		return "False"
	}
	return "None"
}

// pyNumber renders a JSON number as Python prints what json.loads makes
// of it: an int as written, a float in Python's shortest form.
func pyNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return pyFloat(f)
}

func pyFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "inf"
	}
	if math.IsInf(f, -1) {
		return "-inf"
	}
	a := math.Abs(f)
	if a != 0 && (a >= 1e16 || a < 1e-4) {
		m, e, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		sign := e[0]
		e = strings.TrimLeft(e[1:], "0")
		if len(e) < 2 {
			e = strings.Repeat("0", 2-len(e)) + e
		}
		return m + "e" + string(sign) + e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// pyStr renders s as Python's repr of a str.
func pyStr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// schemaError is one way a body does not fit its schema.
type schemaError struct {
	msg        string
	depth      int
	typeUnmet  bool // the error's schema names no type, or one the value is not
	sequenceNo int
}

// check returns the error Placement's validator would report for n
// against s, or "" when n fits.
func (s *schema) check(n *jsonNode) string {
	var errs []schemaError
	s.collect(n, 0, &errs)
	if len(errs) == 0 {
		return ""
	}
	return pick(errs).msg
}

// pick is the error the validator reports first of errs: the nearest the
// top, a type error (or one of a schema naming no type) before others
// there, then the first found.
func pick(errs []schemaError) schemaError {
	best := errs[0]
	for _, e := range errs[1:] {
		if e.depth < best.depth || e.depth == best.depth && e.typeUnmet && !best.typeUnmet {
			best = e
		}
	}
	return best
}

func (s *schema) matchesType(n *jsonNode) bool {
	if len(s.types) == 0 {
		return false
	}
	return slices.ContainsFunc(s.types, n.is)
}

// collect appends to errs what n breaks of s, keyword by keyword in s's
// order (the validator's), descending into n's members at depth+1.
func (s *schema) collect(n *jsonNode, depth int, errs *[]schemaError) {
	add := func(msg string) {
		*errs = append(*errs, schemaError{msg: msg, depth: depth, typeUnmet: !s.matchesType(n), sequenceNo: len(*errs)})
	}
	for _, kw := range s.order {
		switch kw {
		case "properties", "patternProperties", "items":
			s.collectMembers(kw, n, depth+1, errs)
		case "additionalProperties":
			if msg := s.extrasError(n); msg != "" {
				add(msg)
			}
		case "anyOf":
			if msg := s.anyOfError(n, depth); msg != "" {
				add(msg)
			}
		default:
			for _, msg := range s.keywordErrors(kw, n) {
				add(msg)
			}
		}
	}
}

// collectMembers checks n's members against the subschemas keyword kw
// gives them (properties, patternProperties, items), at depth.
func (s *schema) collectMembers(kw string, n *jsonNode, depth int, errs *[]schemaError) {
	switch {
	case kw == "properties" && n.kind == "object":
		for _, p := range s.props {
			if v, ok := n.obj[p.name]; ok {
				p.s.collect(v, depth, errs)
			}
		}
	case kw == "patternProperties" && n.kind == "object":
		for _, p := range s.patterns {
			for _, k := range n.keys {
				if p.re.MatchString(k) {
					p.s.collect(n.obj[k], depth, errs)
				}
			}
		}
	case kw == "items" && n.kind == "array" && s.items != nil:
		for _, e := range n.arr {
			s.items.collect(e, depth, errs)
		}
	}
}

// extrasError is additionalProperties' message for n's members that no
// property or pattern of s names ("" when none, or extras are allowed).
func (s *schema) extrasError(n *jsonNode) string {
	if n.kind != "object" || !s.noExtra {
		return ""
	}
	var extras []string
	for _, k := range n.keys {
		if s.prop(k) != nil || slices.ContainsFunc(s.patterns, func(p namedSchema) bool { return p.re.MatchString(k) }) {
			continue
		}
		extras = append(extras, k)
	}
	if len(extras) == 0 {
		return ""
	}
	slices.Sort(extras)
	quoted := make([]string, len(extras))
	for i, e := range extras {
		quoted[i] = pyStr(e)
	}
	if len(s.patterns) > 0 {
		pats := make([]string, len(s.patterns))
		for i, p := range s.patterns {
			pats[i] = p.name
		}
		slices.Sort(pats)
		for i := range pats {
			pats[i] = pyStr(pats[i])
		}
		verb := "does"
		if len(extras) > 1 {
			verb = "do"
		}
		return fmt.Sprintf("%s %s not match any of the regexes: %s", strings.Join(quoted, ", "), verb, strings.Join(pats, ", "))
	}
	verb := "was"
	if len(extras) > 1 {
		verb = "were"
	}
	return fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(quoted, ", "), verb)
}

// anyOfError is anyOf's message when n fits none of s's alternatives
// ("" when one fits): the validator reports the least relevant of the
// alternatives' best errors (deepest, of a matching type), or the anyOf
// itself when they tie.
func (s *schema) anyOfError(n *jsonNode, depth int) string {
	var bests []schemaError
	for _, alt := range s.anyOf {
		var sub []schemaError
		alt.collect(n, depth, &sub)
		if len(sub) == 0 {
			return ""
		}
		bests = append(bests, pick(sub))
	}
	if len(bests) == 0 {
		return ""
	}
	least, tie := bests[0], false
	for _, b := range bests[1:] {
		switch {
		case b.depth > least.depth || b.depth == least.depth && !b.typeUnmet && least.typeUnmet:
			least, tie = b, false
		case b.depth == least.depth && b.typeUnmet == least.typeUnmet:
			tie = true
		}
	}
	if tie {
		return fmt.Sprintf("%s is not valid under any of the given schemas", n.repr())
	}
	return least.msg
}

// keywordErrors is what n itself breaks of s's keyword kw, for the
// keywords that look at n alone (type, required, the bounds, format).
func (s *schema) keywordErrors(kw string, n *jsonNode) []string {
	one := func(format string, args ...any) []string { return []string{fmt.Sprintf(format, args...)} }
	switch kw {
	case "type":
		if len(s.types) > 0 && !s.matchesType(n) {
			quoted := make([]string, len(s.types))
			for i, t := range s.types {
				quoted[i] = pyStr(t)
			}
			return one("%s is not of type %s", n.repr(), strings.Join(quoted, ", "))
		}
	case "required":
		if n.kind != "object" {
			return nil
		}
		var msgs []string
		for _, r := range s.required {
			if _, ok := n.obj[r]; !ok {
				msgs = append(msgs, fmt.Sprintf("%s is a required property", pyStr(r)))
			}
		}
		return msgs
	case "minProperties":
		if n.kind == "object" && s.minProps >= 0 && len(n.keys) < s.minProps {
			return one("%s does not have enough properties", n.repr())
		}
	case "minLength":
		if n.kind == "string" && s.minLen >= 0 && len([]rune(n.str)) < s.minLen {
			return one("%s is too short", n.repr())
		}
	case "maxLength":
		if n.kind == "string" && s.maxLen >= 0 && len([]rune(n.str)) > s.maxLen {
			return one("%s is too long", n.repr())
		}
	case "pattern":
		if n.kind == "string" && s.pattern != "" && !compiled(s.pattern).MatchString(n.str) {
			return one("%s does not match %s", n.repr(), pyStr(s.pattern))
		}
	case "minimum", "maximum":
		return s.boundErrors(kw, n)
	case "minItems":
		if n.kind == "array" && s.minItems >= 0 && len(n.arr) < s.minItems {
			return one("%s is too short", n.repr())
		}
	case "uniqueItems":
		if n.kind == "array" && s.unique {
			seen := map[string]bool{}
			for _, e := range n.arr {
				if seen[e.repr()] {
					return one("%s has non-unique elements", n.repr())
				}
				seen[e.repr()] = true
			}
		}
	case "format":
		// (Placement's uuid format is whatever Python's UUID() reads:
		// dashless too.)
		if n.kind == "string" && s.formatUUID && !isUUID(n.str) {
			return one("%s is not a 'uuid'", n.repr())
		}
	}
	return nil
}

// boundErrors is minimum's or maximum's (kw) message for a number n out
// of s's bound.
func (s *schema) boundErrors(kw string, n *jsonNode) []string {
	bound := s.minimum
	if kw == "maximum" {
		bound = s.maximum
	}
	if n.kind != "number" || bound == "" {
		return nil
	}
	v, _ := n.num.Float64()
	b, _ := strconv.ParseFloat(bound, 64)
	if kw == "minimum" && v < b {
		return []string{fmt.Sprintf("%s is less than the minimum of %s", n.repr(), bound)}
	}
	if kw == "maximum" && v > b {
		return []string{fmt.Sprintf("%s is greater than the maximum of %s", n.repr(), bound)}
	}
	return nil
}

// validateBody checks a JSON body against s: 400 "JSON does not
// validate: …" with the validator's message when it does not fit (and
// "Malformed JSON" when it is not JSON).
func validateBody(data []byte, s *schema) error {
	n, err := parseJSONNode(data)
	if err != nil {
		return errorf(http.StatusBadRequest, "Malformed JSON: %v", err)
	}
	if msg := s.check(n); msg != "" {
		return errorf(http.StatusBadRequest, "JSON does not validate: %s", msg)
	}
	return nil
}

// Patterns of Placement's schemas.
const (
	uuidPattern     = "^[0-9a-fA-F-]{36}$"
	rcPatternSrc    = "^[A-Z0-9_]+$"
	customPattern   = "^CUSTOM_[A-Z0-9_]+$"
	groupPattern133 = "[a-zA-Z0-9_-]{1,64}"
	maxIntString    = "2147483647"
	maxRatioString  = "3.40282e+38"
)

// The bodies' schemas, by what takes them.
var (
	inventoryRecord = object("type,properties,required,additionalProperties",
		"resource_provider_generation", typed("integer"),
		"total", integer("1", maxIntString),
		"reserved", integer("0", maxIntString),
		"min_unit", integer("1", maxIntString),
		"max_unit", integer("1", maxIntString),
		"step_size", integer("1", maxIntString),
		"allocation_ratio", newSchema("type,maximum").with(func(s *schema) { s.types, s.maximum = []string{"number"}, maxRatioString }),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"total", "resource_provider_generation"} })

	// schemaPostInventory is POST …/inventories; schemaPutInventory PUT
	// …/inventories/{rc}; schemaPutInventories PUT …/inventories.
	schemaPostInventory = inventoryRecord.withProp("resource_class", str(-1, -1, rcPatternSrc), true).with(func(s *schema) {
		s.required = []string{"total", "resource_class"}
	})
	schemaPutInventory   = inventoryRecord.clone().with(func(s *schema) { s.required = []string{"total"} })
	schemaPutInventories = object("type,properties,required,additionalProperties",
		"resource_provider_generation", typed("integer"),
		"inventories", newSchema("type,patternProperties").with(func(s *schema) { s.types = []string{"object"} }).patternProp(rcPatternSrc, schemaPutInventory),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"resource_provider_generation", "inventories"} })

	// schemaProviderTraits is PUT /resource_providers/{uuid}/traits.
	schemaProviderTraits = object("type,properties,required,additionalProperties",
		"traits", newSchema("type,items").with(func(s *schema) { s.types, s.items = []string{"array"}, str(1, 255, "") }),
		"resource_provider_generation", typed("integer"),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"traits", "resource_provider_generation"} })

	// schemaResourceClass is POST /resource_classes, and PUT
	// /resource_classes/{name} at 1.2–1.6.
	schemaResourceClass = object("type,properties,required,additionalProperties",
		"name", str(-1, 255, customPattern),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"name"} })
)

// allocationSchemas are PUT /allocations/{consumer}'s body at minor and
// one consumer's entry in POST /allocations and POST /reshaper
// (deletable: an empty "allocations" allowed).
func allocationSchema(minor int, deletable bool) *schema {
	resources := newSchema("type,minProperties,patternProperties,additionalProperties").with(func(s *schema) {
		s.types, s.minProps, s.noExtra = []string{"object"}, 1, true
	}).patternProp(rcPatternSrc, integer("1", ""))
	if minor < 12 {
		rp := object("type,properties,additionalProperties,required", "uuid", uuidString()).with(func(s *schema) {
			s.noExtra, s.required = true, []string{"uuid"}
		})
		entry := object("type,properties,required,additionalProperties", "resource_provider", rp, "resources", resources).with(func(s *schema) {
			s.noExtra, s.required = true, []string{"resource_provider", "resources"}
		})
		list := newSchema("type,minItems,items").with(func(s *schema) { s.types, s.minItems, s.items = []string{"array"}, 1, entry })
		s := object("type,properties,required,additionalProperties", "allocations", list).with(func(s *schema) {
			s.noExtra, s.required = true, []string{"allocations"}
		})
		if minor >= 8 {
			s = s.withProp("project_id", str(1, 255, ""), true).withProp("user_id", str(1, 255, ""), true)
		}
		return s
	}
	entry := object("type,properties,required,additionalProperties", "generation", typed("integer"), "resources", resources).with(func(s *schema) {
		s.noExtra, s.required = true, []string{"resources"}
	})
	allocs := newSchema("type,minProperties,patternProperties,additionalProperties").with(func(s *schema) {
		s.types, s.minProps, s.noExtra = []string{"object"}, 1, true
	}).patternProp(uuidPattern, entry)
	if deletable || minor >= 28 {
		allocs.minProps = 0
	}
	s := object("type,properties,additionalProperties,required",
		"allocations", allocs, "project_id", str(1, 255, ""), "user_id", str(1, 255, ""),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"allocations", "project_id", "user_id"} })
	if minor >= 28 {
		s = s.withProp("consumer_generation", typed("integer", "null"), true)
	}
	if minor >= 34 {
		group := newSchema("type,minItems,items").with(func(s *schema) { s.types, s.minItems, s.items = []string{"array"}, 1, uuidString() })
		mappings := newSchema("type,minProperties,patternProperties").with(func(s *schema) { s.types, s.minProps = []string{"object"}, 1 }).
			patternProp(groupPattern133, group)
		s = s.withProp("mappings", mappings, false)
	}
	if minor >= 38 {
		s = s.withProp("consumer_type", str(1, 255, rcPatternSrc), true)
	}
	return s
}

// postAllocationsSchema is POST /allocations' body at minor (minProps 1)
// and POST /reshaper's "allocations" (minProps 0).
func postAllocationsSchema(minor, minProps int) *schema {
	return newSchema("type,minProperties,additionalProperties,patternProperties").with(func(s *schema) {
		s.types, s.minProps, s.noExtra = []string{"object"}, minProps, true
	}).patternProp(uuidPattern, allocationSchema(minor, true))
}

// reshaperSchema is POST /reshaper's body at minor.
func reshaperSchema(minor int) *schema {
	invs := newSchema("type,patternProperties,minProperties,additionalProperties").with(func(s *schema) {
		s.types, s.minProps, s.noExtra = []string{"object"}, 1, true
	}).patternProp(uuidPattern, schemaPutInventories)
	am := minor
	if am < 34 {
		am = 28
	}
	return object("type,properties,required,additionalProperties",
		"inventories", invs, "allocations", postAllocationsSchema(am, 0),
	).with(func(s *schema) { s.noExtra, s.required = true, []string{"inventories", "allocations"} })
}

// usagesSchema is GET /usages' query at minor.
func usagesSchema(minor int) *schema {
	s := object("type,properties,required,additionalProperties", "project_id", str(1, 255, ""), "user_id", str(1, 255, "")).
		with(func(s *schema) { s.noExtra, s.required = true, []string{"project_id"} })
	if minor >= 38 {
		s = s.withProp("consumer_type", str(1, 255, "^[A-Z0-9_]+$|^all|^unknown$"), false)
	}
	return s
}

// validateQuery checks a query string against s as Placement checks its
// query parameters (each one's last value a string, in the order given):
// 400 "Invalid query string parameters: …".
func validateQuery(raw string, s *schema) error {
	n := &jsonNode{kind: "object", obj: map[string]*jsonNode{}}
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k, err1 := url.QueryUnescape(k)
		v, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return errorf(http.StatusBadRequest, "Invalid query string parameters: cannot decode %q", part)
		}
		if _, seen := n.obj[k]; !seen {
			n.keys = append(n.keys, k)
		}
		n.obj[k] = &jsonNode{kind: "string", str: v}
	}
	if msg := s.check(n); msg != "" {
		return errorf(http.StatusBadRequest, "Invalid query string parameters: %s", msg)
	}
	return nil
}

// pyList renders strings as Python's repr of a list of them.
func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = pyStr(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// candidatesSchema is GET /allocation_candidates' query at minor.
func candidatesSchema(minor int) *schema {
	limit := str(1, -1, "^[1-9][0-9]*$")
	limit.types = []string{"integer", "string"}
	if minor < 25 {
		s := object("type,properties,required,additionalProperties", "resources", typed("string")).
			with(func(s *schema) { s.noExtra, s.required = true, []string{"resources"} })
		if minor >= 16 {
			s = s.withProp("limit", limit, false)
		}
		if minor >= 17 {
			s = s.withProp("required", typed("string"), false)
		}
		if minor >= 21 {
			s = s.withProp("member_of", typed("string"), false)
		}
		return s
	}
	s := object("type,properties,additionalProperties,patternProperties", "limit", limit, "group_policy", typed("string")).
		with(func(s *schema) { s.noExtra = true })
	group := "[1-9][0-9]*"
	if minor >= 33 {
		group = groupPattern133
	}
	kinds := []string{"resources", "required", "member_of"}
	if minor >= 31 {
		kinds = append(kinds, "in_tree")
	}
	for _, k := range kinds {
		s.patternProp("^"+k+"("+group+")?$", typed("string"))
	}
	if minor >= 35 {
		s = s.withProp("root_required", typed("string"), false)
	}
	if minor >= 36 {
		s = s.withProp("same_subtree", typed("string"), false)
	}
	return s
}

// providerSchemas are POST (create) and PUT /resource_providers' bodies
// at minor.
func providerSchema(minor int, create bool) *schema {
	s := object("type,properties,required,additionalProperties", "name", str(-1, 200, "")).
		with(func(s *schema) { s.noExtra, s.required = true, []string{"name"} })
	if create {
		s = s.withProp("uuid", uuidString(), false)
	}
	if minor >= 14 {
		parent := newSchema("anyOf")
		parent.anyOf = []*schema{uuidString(), typed("null")}
		s = s.withProp("parent_provider_uuid", parent, false)
	}
	return s
}

var (
	createProviderSchemas = byMinor(func(m int) *schema { return providerSchema(m, true) })
	updateProviderSchemas = byMinor(func(m int) *schema { return providerSchema(m, false) })
)
