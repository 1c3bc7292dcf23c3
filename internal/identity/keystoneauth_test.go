package identity

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"keel/internal/testenv"
)

// keystoneauthScript logs in with keystoneauth1 twice: with the v3
// Password plugin at the versioned URL, and with the generic plugin at the
// unversioned one (which discovers v3 from the 300 root document). It
// prints what the session learned.
const keystoneauthScript = `
import json, sys
from keystoneauth1 import session
from keystoneauth1.identity import v3, generic
base, password = sys.argv[1], sys.argv[2]
out = {}
for label, auth in [
    ("v3", v3.Password(auth_url=base + "/identity/v3", username="admin", password=password,
                       project_name="admin", user_domain_name="Default", project_domain_name="Default")),
    ("generic", generic.Password(auth_url=base + "/identity", username="demo", password=password,
                                 project_name="demo", user_domain_id="default", project_domain_id="default")),
]:
    s = session.Session(auth=auth)
    access = auth.get_access(s)
    out[label] = {
        "token": s.get_token(),
        "user_id": s.get_user_id(),
        "project_id": s.get_project_id(),
        "roles": access.role_names,
        "expires": access.expires.isoformat(),
        "compute": s.get_endpoint(service_type="compute", interface="public", region_name="RegionOne"),
        "placement": s.get_endpoint(service_type="placement", interface="public"),
        "image": s.get_endpoint(service_type="image"),
        "identity": s.get_endpoint(service_type="identity", interface="public"),
        "identity_internal": s.get_endpoint(service_type="identity", interface="internal"),
        "compute_admin": s.get_endpoint(service_type="compute", interface="admin"),
        "watcher": s.get_endpoint(service_type="infra-optim", interface="internal"),
    }
print(json.dumps(out))
`

// TestKeystoneauth1 checks that a real keystoneauth1 (Debian's
// python3-keystoneauth1) logs in and finds keel's endpoints.
func TestKeystoneauth1(t *testing.T) {
	testenv.External(t, "keystoneauth1 (Debian's python3-keystoneauth1)")
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import keystoneauth1").Run(); err != nil {
		t.Fatal("keystoneauth1 not importable by /usr/bin/python3 (apt-get install python3-keystoneauth1; .ci/run does):", err)
	}
	ts := newTestServer(t)
	ts.iss.Catalog = CatalogOptions{Services: []Service{{Type: "infra-optim", Name: "watcher", URL: "http://127.0.0.1:9322"}}}
	// keystoneauth1 re-authenticates when a token is about to expire by
	// the wall clock, so issue tokens by it here.
	ts.clk.Set(time.Now())
	cmd := exec.CommandContext(t.Context(), python, "-c", keystoneauthScript, ts.URL, testPassword)
	cmd.Env = append(os.Environ(), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	cmd.Stderr = &testWriter{t}
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("keystoneauth1: %v", err)
	}
	var out map[string]struct {
		Token     string   `json:"token"`
		UserID    string   `json:"user_id"`
		ProjectID string   `json:"project_id"`
		Roles     []string `json:"roles"`
		Expires   string   `json:"expires"`
		Compute   string   `json:"compute"`
		Placement string   `json:"placement"`
		Image     string   `json:"image"`
		Identity  string   `json:"identity"`
		// The internal and admin interfaces (keystonemiddleware asks for
		// internal) and a configured service.
		IdentityInternal string `json:"identity_internal"`
		ComputeAdmin     string `json:"compute_admin"`
		Watcher          string `json:"watcher"`
	}
	if err := json.Unmarshal(outb, &out); err != nil {
		t.Fatalf("keystoneauth1 output %q: %v", outb, err)
	}
	want := map[string]struct{ user, project string }{
		"v3":      {adminUser, adminProject},
		"generic": {demoUser, demoProject},
	}
	for label, w := range want {
		got, ok := out[label]
		if !ok {
			t.Fatalf("%s: no result in %s", label, outb)
		}
		p, err := ts.iss.Validate(got.Token)
		if err != nil {
			t.Errorf("%s: token does not validate: %v", label, err)
		}
		if got.UserID != w.user || got.ProjectID != w.project || p.UserID != w.user {
			t.Errorf("%s: user %s project %s, want %s %s", label, got.UserID, got.ProjectID, w.user, w.project)
		}
		if exp, err := time.Parse(time.RFC3339Nano, got.Expires); err != nil || !exp.Equal(p.ExpiresAt) {
			t.Errorf("%s: expires %q", label, got.Expires)
		}
		if got.Compute != ts.URL+"/compute/v2.1" || got.Placement != ts.URL+"/placement" ||
			got.Image != ts.URL+"/image" || got.Identity != ts.URL+"/identity/v3" ||
			got.IdentityInternal != ts.URL+"/identity/v3" || got.ComputeAdmin != ts.URL+"/compute/v2.1" || got.Watcher != "http://127.0.0.1:9322" {
			t.Errorf("%s: endpoints %+v", label, got)
		}
		if len(got.Roles) == 0 {
			t.Errorf("%s: no roles", label)
		}
	}
	if r := ts.do(t, "GET", "/identity/v3/auth/tokens", "", "X-Auth-Token", out["v3"].Token,
		"X-Subject-Token", out["generic"].Token); r.status != http.StatusOK {
		t.Errorf("admin validating the demo token keystoneauth1 got: %d", r.status)
	}
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("python: %s", p)
	return len(p), nil
}
