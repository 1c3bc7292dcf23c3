package compute_test

import (
	"strings"
	"testing"
)

func TestVersionListHasV20FirstThenV21(t *testing.T) {
	e := newEnv(t)
	var body struct {
		Versions []struct {
			ID, Status, Version string
			MinVersion          string `json:"min_version"`
			Links               []struct{ Rel, Href string }
		}
	}
	for _, path := range []string{"/compute", "/compute/"} {
		if resp := e.call("GET", path, "", "", nil, &body); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		vs := body.Versions
		if len(vs) != 2 || vs[0].ID != "v2.0" || vs[1].ID != "v2.1" {
			t.Fatalf("GET %s: versions %+v, want v2.0 then v2.1", path, vs)
		}
		if vs[0].Status != "SUPPORTED" || vs[0].Version != "" || vs[1].Status != "CURRENT" || vs[1].Version != "2.87" || vs[1].MinVersion != "2.1" {
			t.Fatalf("GET %s: entries %+v", path, vs)
		}
		if len(vs[0].Links) != 1 || !strings.HasSuffix(vs[0].Links[0].Href, "/compute/v2/") {
			t.Fatalf("GET %s: v2.0 links %+v", path, vs[0].Links)
		}
	}
}

func TestPersonalityByMicroversion(t *testing.T) {
	for _, tc := range []struct {
		name        string
		version     string
		personality any
		status      int
		fault       string
	}{
		{"base64 before 2.57", "2.56", []map[string]any{{"path": "/etc/motd", "contents": "aGVsbG8K"}}, 202, ""},
		{"base64 with a newline", "2.1", []map[string]any{{"path": "/etc/motd", "contents": "aGVs\nbG8K"}}, 202, ""},
		{"empty list", "2.1", []any{}, 202, ""},
		{"not base64", "2.1", []map[string]any{{"path": "/etc/motd", "contents": "This is a test file."}}, 400, "'This is a test file.' is not a 'base64'"},
		{"bad padding", "2.56", []map[string]any{{"path": "/a", "contents": "YQ"}}, 400, "is not a 'base64'"},
		{"contents not a string", "2.1", []map[string]any{{"path": "/a", "contents": 5}}, 400, "is not of type 'string'"},
		{"unknown key", "2.1", []map[string]any{{"path": "/a", "data": "YQ=="}}, 400, "'data' was unexpected"},
		{"not a list", "2.1", "YQ==", 400, "is not of type 'array'"},
		{"refused at 2.57", "2.57", []map[string]any{{"path": "/etc/motd", "contents": "aGVsbG8K"}}, 400, "('personality' was unexpected)"},
		{"refused at latest", "latest", []any{}, 400, "('personality' was unexpected)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var out map[string]map[string]any
			srv := map[string]any{"name": "vm", "flavorRef": "1", "personality": tc.personality}
			if tc.version == "2.56" || tc.version == "2.57" || tc.version == "latest" {
				srv["networks"] = "none"
			}
			resp := e.call("POST", "/compute/v2.1/servers", "member", tc.version, map[string]any{"server": srv}, &out)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.status, out)
			}
			if tc.fault != "" {
				msg, _ := out["badRequest"]["message"].(string)
				if !strings.Contains(msg, tc.fault) {
					t.Fatalf("fault %q, want it to hold %q", msg, tc.fault)
				}
			}
		})
	}
}
