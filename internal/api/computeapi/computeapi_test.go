package computeapi_test

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
		if vs[0].Status != "SUPPORTED" || vs[0].Version != "" || vs[1].Status != "CURRENT" || vs[1].Version != "2.91" || vs[1].MinVersion != "2.1" {
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

// TestPersonalityQuota: injected_files, injected_file_path_bytes and
// injected_file_content_bytes limit a boot's personality (403), as the
// absolute limits show them.
func TestPersonalityQuota(t *testing.T) {
	e := newEnv(t)
	if resp := e.call("PUT", "/compute/v2.1/os-quota-sets/p-demo", "admin", "", map[string]any{"quota_set": map[string]any{
		"injected_files": 2, "injected_file_path_bytes": 10, "injected_file_content_bytes": 8}}, nil); resp.StatusCode != 200 {
		t.Fatalf("setting the quota: %d", resp.StatusCode)
	}
	file := func(path, contents string) map[string]string {
		return map[string]string{"path": path, "contents": contents}
	}
	for _, tc := range []struct {
		name  string
		files []map[string]string
		want  int
	}{
		{"at the limits", []map[string]string{file("/a", "YWJj"), file("/b", "YWJjZA==")}, 202},
		{"too many", []map[string]string{file("/a", "YWJj"), file("/b", "YWJj"), file("/c", "YWJj")}, 403},
		{"long path", []map[string]string{file("/a/b/c/d/e/f", "YWJj")}, 403},
		{"large contents", []map[string]string{file("/a", "YWJjZGVmZ2g=")}, 403},
	} {
		body := map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "networks": "none", "personality": tc.files}}
		if resp := e.call("POST", "/compute/v2.1/servers", "member", "2.56", body, nil); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}
