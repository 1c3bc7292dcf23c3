package httpbody_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"keel/internal/httpbody"
)

func TestDecodeJSON(t *testing.T) {
	var v struct{ A int }
	cases := []struct {
		body      string
		limit     int64
		tooLarge  bool
		malformed bool
	}{
		{`{"A": 1}`, 100, false, false},
		{`{"A": 1}`, 4, true, false},
		{``, 100, false, true},
		{`{"A": "x"}`, 100, false, true},
		{`{"A": 1} {"A": 2}`, 100, false, true},
		{`{"A": 1}` + strings.Repeat(" ", 100), 100, true, false},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		err := httpbody.DecodeJSON(r, c.limit, &v)
		var m *httpbody.MalformedError
		if httpbody.IsTooLarge(err) != c.tooLarge || (err != nil && !c.tooLarge && !errors.As(err, &m)) || (err == nil) != (!c.tooLarge && !c.malformed) {
			t.Errorf("%q with limit %d: %v", c.body, c.limit, err)
		}
	}
	// Content-Length alone decides, without reading.
	r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
	r.ContentLength = 1 << 30
	if err := httpbody.DecodeJSON(r, 0, &v); !httpbody.IsTooLarge(err) {
		t.Fatalf("declared 1 GiB: %v", err)
	}
}

func TestDecodeJSONStrict(t *testing.T) {
	var v struct{ A int }
	for body, ok := range map[string]bool{`{"A": 1}`: true, `{"A": 1, "B": 2}`: false, `{"A": 1} {}`: false, ``: false} {
		err := httpbody.DecodeJSONStrict(httptest.NewRequest("POST", "/", strings.NewReader(body)), 100, &v)
		var m *httpbody.MalformedError
		if (err == nil) != ok || (err != nil && !errors.As(err, &m)) {
			t.Errorf("%q: %v", body, err)
		}
	}
}

func TestNULRefused(t *testing.T) {
	for body, refused := range map[string]bool{
		`{"a": "x\u0000y"}`:       true,
		`{"a\u0000": 1}`:          true,
		`{"a": "\\\u0000"}`:       true,  // an escaped backslash, then the escape
		`{"a": "\\u0000"}`:        false, // the text \u0000, not a NUL
		`{"a": "\u00001"}`:        true,
		`{"a": "\u0001"}`:         false,
		`{"a": "x\\\\u0000y"}`:    false,
		`{"a": ["ok", "\u0000"]}`: true,
	} {
		var v any
		err := httpbody.DecodeJSON(httptest.NewRequest("POST", "/", strings.NewReader(body)), 1000, &v)
		var strict map[string]any
		errStrict := httpbody.DecodeJSONStrict(httptest.NewRequest("POST", "/", strings.NewReader(body)), 1000, &strict)
		if (err != nil) != refused || (errStrict != nil) != refused {
			t.Errorf("%s: %v / %v, want refused %v", body, err, errStrict, refused)
		}
	}
}
