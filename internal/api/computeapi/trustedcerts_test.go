package computeapi_test

import (
	"slices"
	"strings"
	"testing"
)

// TestTrustedImageCertificates: from 2.63 a server keeps the certificate
// ids it was created with (trusted_image_certificates) and shows them in
// show, list and the rebuild's answer; a rebuild replaces them, or with
// null takes them away; Nova's schema refusals are 400, and below 2.63
// the property is unknown (as Nova with [glance] verify_glance_signatures
// off, its default: no image signature is verified).
func TestTrustedImageCertificates(t *testing.T) {
	e := newEnv(t)
	certs := []any{"cert-a", "cert-b"}
	boot := func(v string, c any) (int, map[string]map[string]any) {
		var out map[string]map[string]any
		resp := e.call("POST", "/compute/v2.1/servers", "member", v, map[string]any{"server": map[string]any{
			"name": "signed", "flavorRef": "1", "imageRef": "img", "networks": "none", "trusted_image_certificates": c}}, &out)
		return resp.StatusCode, out
	}
	for _, tc := range []struct {
		version string
		certs   any
		fault   string
	}{
		{"2.62", certs, "('trusted_image_certificates' was unexpected)"},
		{"2.63", []any{}, "[] is too short"},
		{"2.63", []any{"a", "a"}, "has non-unique elements"},
		{"2.63", []any{""}, "'' is too short"},
		{"2.63", []any{5}, "is not of type 'string'"},
		{"2.63", "cert-a", "is not of type 'array', 'null'"},
	} {
		code, out := boot(tc.version, tc.certs)
		if msg, _ := out["badRequest"]["message"].(string); code != 400 || !strings.Contains(msg, tc.fault) {
			t.Fatalf("boot at %s with %v: %d %v, want 400 %q", tc.version, tc.certs, code, out, tc.fault)
		}
	}
	code, out := boot("2.63", certs)
	if code != 202 {
		t.Fatalf("boot with certificates: %d %v", code, out)
	}
	id, _ := out["server"]["id"].(string)
	e.waitStatus(id, "member", "ACTIVE")
	shown := func(v string) (any, bool) {
		var show struct{ Server map[string]any }
		e.call("GET", "/compute/v2.1/servers/"+id, "member", v, nil, &show)
		c, ok := show.Server["trusted_image_certificates"]
		return c, ok
	}
	if c, _ := shown("2.63"); !sameIDs(c, "cert-a", "cert-b") {
		t.Fatalf("show at 2.63: trusted_image_certificates %v, want [cert-a cert-b]", c)
	}
	if c, ok := shown("2.62"); ok {
		t.Fatalf("show at 2.62 has trusted_image_certificates %v", c)
	}
	var list struct{ Servers []map[string]any }
	e.call("GET", "/compute/v2.1/servers/detail", "member", "2.63", nil, &list)
	if len(list.Servers) != 1 || !sameIDs(list.Servers[0]["trusted_image_certificates"], "cert-a", "cert-b") {
		t.Fatalf("list at 2.63: %v", list.Servers)
	}
	// A rebuild replaces them; below 2.63 it may not name them.
	e.act(id, "member", "2.62", map[string]any{"rebuild": map[string]any{"imageRef": "img", "trusted_image_certificates": []any{"x"}}}, 400)
	rebuilt := e.act(id, "member", "2.63", map[string]any{"rebuild": map[string]any{"imageRef": "img", "trusted_image_certificates": []any{"cert-c"}}}, 202)
	if s, _ := rebuilt["server"].(map[string]any); s == nil || !sameIDs(s["trusted_image_certificates"], "cert-c") {
		t.Fatalf("rebuild's answer: %v, want trusted_image_certificates [cert-c]", rebuilt)
	}
	e.waitStatus(id, "member", "ACTIVE")
	if c, _ := shown("2.63"); !sameIDs(c, "cert-c") {
		t.Fatalf("after the rebuild: %v, want [cert-c]", c)
	}
	e.act(id, "member", "2.63", map[string]any{"rebuild": map[string]any{"imageRef": "img", "trusted_image_certificates": nil}}, 202)
	e.waitStatus(id, "member", "ACTIVE")
	if c, ok := shown("2.63"); !ok || c != nil {
		t.Fatalf("after a rebuild with null: %v (present %v), want null", c, ok)
	}
}

// sameIDs reports whether v, a decoded JSON list, holds exactly ids.
func sameIDs(v any, ids ...string) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(ids) {
		return false
	}
	return !slices.ContainsFunc(l, func(x any) bool { s, _ := x.(string); return !slices.Contains(ids, s) })
}
