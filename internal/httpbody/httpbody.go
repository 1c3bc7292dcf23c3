// Package httpbody reads JSON request bodies the same way for every keel
// API (compute, placement, identity, keel's own): the body is capped at a
// limit, a larger one is reported as too large (the APIs answer 413 Request
// Entity Too Large, as Nova and Placement do) rather than cut short and
// misread, and a body that is not one JSON value of the expected shape is
// reported as malformed (400).
package httpbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// DefaultLimit is the largest request body keel's APIs read: 1 MiB, far
// above any real request (a POST /allocations for many consumers is a few
// KiB) and below anything that would hurt the server.
const DefaultLimit int64 = 1 << 20

// TooLargeError is returned when the body exceeds the limit.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request body is larger than the limit of %d bytes", e.Limit)
}

// MalformedError is returned when the body is not valid JSON for the
// target (syntax errors, wrong types, trailing data).
type MalformedError struct{ Err error }

func (e *MalformedError) Error() string { return UserFacing(e.Err) }

// UserFacing words a JSON decoding failure for an API's user: the field
// and the JSON type expected, never Go's names for them.
func UserFacing(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the request body"
		}
		return fmt.Sprintf("Invalid input for field/attribute %s. Value: a JSON %s is not of type '%s'", field, te.Value, jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Sprintf("the body is not valid JSON (at byte %d)", se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is not valid JSON (it ends too early)"
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "Additional properties are not allowed (" + strings.ReplaceAll(f, `"`, "'") + " was unexpected)"
	}
	return strings.TrimPrefix(msg, "json: ")
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "value"
}
func (e *MalformedError) Unwrap() error { return e.Err }

// Read returns the whole body, or a TooLargeError when it is longer than
// limit bytes (checked against Content-Length first, so an oversized upload
// is refused without being read).
func Read(r *http.Request, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if r.ContentLength > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return body, nil
}

// DecodeJSON reads the body (see Read) and unmarshals it into v. An empty
// body, a syntax error, a type mismatch or data after the JSON value is a
// MalformedError.
func DecodeJSON(r *http.Request, limit int64, v any) error {
	body, err := Read(r, limit)
	if err != nil {
		return err
	}
	return Unmarshal(body, v)
}

// Unmarshal is json.Unmarshal with its failures as MalformedError.
func Unmarshal(body []byte, v any) error {
	if len(body) == 0 {
		return &MalformedError{Err: errors.New("the request body is empty")}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &MalformedError{Err: err}
	}
	return checkNUL(body)
}

// errNUL refuses a body with a NUL character in a string: no store keeps
// one (PostgreSQL refuses it in text and JSON), so no API takes one.
var errNUL = &MalformedError{Err: errors.New("a NUL character (\\u0000) is not allowed in a string")}

// checkNUL refuses a decoded body that holds the JSON escape \u0000 (in
// either case); a raw NUL byte is already refused by the JSON decoder.
func checkNUL(body []byte) error {
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`\u`))
		if j < 0 {
			return nil
		}
		k := i + j
		// An escape only if preceded by an even number of backslashes.
		n := 0
		for b := k - 1; b >= 0 && body[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 && k+6 <= len(body) && string(body[k+2:k+6]) == "0000" {
			return errNUL
		}
		i = k + 2
	}
}

// DecodeJSONStrict is DecodeJSON for bodies whose schema is closed
// (additionalProperties false, as many of Nova's are): a field v has no
// place for is a MalformedError too.
func DecodeJSONStrict(r *http.Request, limit int64, v any) error {
	body, err := Read(r, limit)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return &MalformedError{Err: errors.New("the request body is empty")}
	}
	if string(bytes.TrimSpace(body)) == "null" {
		// A closed schema is an object's, and json would take null for an
		// empty one (the words are Nova's and Placement's).
		return &MalformedError{Err: errors.New("None is not of type 'object'")}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &MalformedError{Err: err}
	}
	if dec.More() {
		return &MalformedError{Err: errors.New("data after the JSON value")}
	}
	return checkNUL(body)
}

// IsTooLarge reports whether err is (or wraps) a TooLargeError.
func IsTooLarge(err error) bool {
	var tl *TooLargeError
	return errors.As(err, &tl)
}
