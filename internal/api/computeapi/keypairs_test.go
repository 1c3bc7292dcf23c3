package computeapi_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// An OpenSSH ed25519 public key made by ssh-keygen, and its MD5
// fingerprint as ssh-keygen -l -E md5 prints it.
const (
	testEd25519   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4aJVfMOZ/BFPLT3XcrMcW0AVv6M0nqHJDOQPkx0izo test@keel"
	testEd25519FP = "b9:75:45:03:de:52:f0:92:68:51:53:65:e2:59:72:39"
)

func TestKeyPairs(t *testing.T) {
	e := newEnv(t)
	var fault map[string]map[string]any
	msg := func() any {
		for _, v := range fault {
			return v["message"]
		}
		return nil
	}
	// reset clears the last error before a call that may fill it.
	reset := func() *map[string]map[string]any { fault = nil; return &fault }

	// Create, by microversion: 200 without type at 2.1, 201 with type from 2.2.
	var c21 struct{ Keypair map[string]any }
	if resp := e.call("POST", "/compute/v2.1/os-keypairs", "member", "2.1", map[string]any{"keypair": map[string]any{"name": "gen"}}, &c21); resp.StatusCode != 200 {
		t.Fatalf("create at 2.1: %d %v", resp.StatusCode, c21)
	}
	k := c21.Keypair
	if _, ok := k["type"]; ok || k["user_id"] != "u-demo" || !strings.HasPrefix(k["public_key"].(string), "ssh-rsa ") ||
		!strings.Contains(k["private_key"].(string), "BEGIN RSA PRIVATE KEY") || len(k["fingerprint"].(string)) != 47 {
		t.Fatalf("generated pair at 2.1: %v", k)
	}
	var imp struct{ Keypair map[string]any }
	if resp := e.call("POST", "/compute/v2.1/os-keypairs", "member", "2.2", map[string]any{"keypair": map[string]any{"name": "imported", "public_key": testEd25519}}, &imp); resp.StatusCode != 201 {
		t.Fatalf("import at 2.2: %d %v", resp.StatusCode, imp)
	}
	if imp.Keypair["type"] != "ssh" || imp.Keypair["fingerprint"] != testEd25519FP || imp.Keypair["private_key"] != nil {
		t.Fatalf("imported pair: %v", imp.Keypair)
	}
	var x struct{ Keypair map[string]any }
	if resp := e.call("POST", "/compute/v2.1/os-keypairs", "member", "2.2", map[string]any{"keypair": map[string]any{"name": "cert", "type": "x509"}}, &x); resp.StatusCode != 201 || x.Keypair["type"] != "x509" {
		t.Fatalf("x509 pair: %d %v", resp.StatusCode, x)
	}
	block, _ := pem.Decode([]byte(x.Keypair["public_key"].(string)))
	if block == nil {
		t.Fatalf("x509 public key is not PEM: %v", x.Keypair["public_key"])
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatalf("x509 public key: %v", err)
	}

	// Refusals, with Nova's codes.
	for _, tc := range []struct {
		name, version, token string
		body                 map[string]any
		want                 int
		text                 string
	}{
		{"duplicate", "2.2", "member", map[string]any{"name": "gen"}, 409, "Key pair 'gen' already exists."},
		{"empty name", "2.2", "member", map[string]any{"name": ""}, 400, ""},
		{"long name", "2.2", "member", map[string]any{"name": strings.Repeat("k", 256)}, 400, ""},
		{"unsafe name", "2.2", "member", map[string]any{"name": `key_/.\@:`}, 400, "Keypair data is invalid: Keypair name contains unsafe characters"},
		{"junk key", "2.2", "member", map[string]any{"name": "j", "public_key": "ssh-rsa JUNK nova@ubuntu"}, 400, "Keypair data is invalid: failed to generate fingerprint"},
		{"blank key", "2.2", "member", map[string]any{"name": "j", "public_key": " "}, 400, ""},
		{"zero blob", "2.2", "member", map[string]any{"name": "j", "public_key": "ssh-rsa " + strings.Repeat("A", 2048) + " x@y"}, 400, ""},
		{"type at 2.1", "2.1", "member", map[string]any{"name": "j", "type": "ssh"}, 400, ""},
		{"bad type", "2.2", "member", map[string]any{"name": "j", "type": "pgp"}, 400, ""},
		{"user_id before 2.10", "2.9", "admin", map[string]any{"name": "j", "user_id": "u-demo"}, 400, ""},
		{"member for another user", "2.10", "member", map[string]any{"name": "j", "user_id": "u-admin"}, 403, ""},
	} {
		resp := e.call("POST", "/compute/v2.1/os-keypairs", tc.token, tc.version, map[string]any{"keypair": tc.body}, reset())
		if resp.StatusCode != tc.want || (tc.text != "" && msg() != tc.text) {
			t.Errorf("%s: %d %v, want %d %q", tc.name, resp.StatusCode, fault, tc.want, tc.text)
		}
	}

	// Show: the full record; another user's pair is not found.
	var show struct{ Keypair map[string]any }
	if resp := e.call("GET", "/compute/v2.1/os-keypairs/imported", "member", "2.2", nil, &show); resp.StatusCode != 200 {
		t.Fatalf("show: %d", resp.StatusCode)
	}
	if s := show.Keypair; s["public_key"] != testEd25519 || s["deleted"] != false || s["id"] == nil || s["created_at"] == nil || s["type"] != "ssh" || s["user_id"] != "u-demo" {
		t.Errorf("show: %v", s)
	}
	if resp := e.call("GET", "/compute/v2.1/os-keypairs/imported", "admin", "2.2", nil, reset()); resp.StatusCode != 404 || msg() != "Keypair imported not found for user u-admin" {
		t.Errorf("admin's own namespace: %d %v", resp.StatusCode, fault)
	}

	// An admin manages another user's pairs from 2.10.
	if resp := e.call("POST", "/compute/v2.1/os-keypairs", "admin", "2.10", map[string]any{"keypair": map[string]any{"name": "for-demo", "user_id": "u-demo", "public_key": testEd25519}}, &imp); resp.StatusCode != 201 || imp.Keypair["user_id"] != "u-demo" {
		t.Fatalf("admin creates for demo: %d %v", resp.StatusCode, imp)
	}
	if resp := e.call("GET", "/compute/v2.1/os-keypairs/for-demo?user_id=u-demo", "admin", "2.10", nil, &show); resp.StatusCode != 200 || show.Keypair["user_id"] != "u-demo" {
		t.Errorf("admin shows demo's: %d %v", resp.StatusCode, show)
	}
	if resp := e.call("GET", "/compute/v2.1/os-keypairs?user_id=u-admin", "member", "2.10", nil, &fault); resp.StatusCode != 403 {
		t.Errorf("member lists the admin's: %d", resp.StatusCode)
	}

	// List, and paging from 2.35.
	type list struct {
		Keypairs []struct{ Keypair map[string]any }
		Links    []map[string]string `json:"keypairs_links"`
	}
	names := func(l list) string {
		var n []string
		for _, k := range l.Keypairs {
			n = append(n, k.Keypair["name"].(string))
		}
		return strings.Join(n, ",")
	}
	var l list
	e.call("GET", "/compute/v2.1/os-keypairs", "member", "2.1", nil, &l)
	if names(l) != "cert,for-demo,gen,imported" || l.Keypairs[0].Keypair["type"] != nil {
		t.Errorf("list at 2.1: %v", l)
	}
	e.call("GET", "/compute/v2.1/os-keypairs?limit=2", "member", "2.35", nil, &l)
	if names(l) != "cert,for-demo" || len(l.Links) != 1 || !strings.Contains(l.Links[0]["href"], "marker=for-demo") || l.Keypairs[0].Keypair["type"] != "x509" {
		t.Errorf("first page: %v", l)
	}
	l = list{}
	e.call("GET", "/compute/v2.1/os-keypairs?limit=2&marker=for-demo", "member", "2.35", nil, &l)
	if names(l) != "gen,imported" {
		t.Errorf("second page: %v", l)
	}
	l = list{}
	e.call("GET", "/compute/v2.1/os-keypairs?limit=2", "member", "2.34", nil, &l)
	if names(l) != "cert,for-demo,gen,imported" || l.Links != nil {
		t.Errorf("limit before 2.35 is ignored: %v", l)
	}
	if resp := e.call("GET", "/compute/v2.1/os-keypairs?marker=nope", "member", "2.35", nil, &fault); resp.StatusCode != 400 {
		t.Errorf("unknown marker: %d", resp.StatusCode)
	}

	// key_name on boot: the caller's pair, shown in the server view.
	var created struct{ Server struct{ ID string } }
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "key_name": "imported"}}, &created); resp.StatusCode != 202 {
		t.Fatalf("boot with key_name: %d", resp.StatusCode)
	}
	var srv struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+created.Server.ID, "member", "", nil, &srv)
	if srv.Server["key_name"] != "imported" {
		t.Errorf("server view key_name: %v", srv.Server["key_name"])
	}
	if resp := e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "key_name": "imported"}}, reset()); resp.StatusCode != 400 || msg() != "Invalid key_name provided." {
		t.Errorf("boot with another user's key: %d %v", resp.StatusCode, fault)
	}

	// Delete: 202 at 2.1, 204 from 2.2, then 404.
	if resp := e.call("DELETE", "/compute/v2.1/os-keypairs/gen", "member", "2.1", nil, nil); resp.StatusCode != 202 {
		t.Errorf("delete at 2.1: %d", resp.StatusCode)
	}
	if resp := e.call("DELETE", "/compute/v2.1/os-keypairs/cert", "member", "2.2", nil, nil); resp.StatusCode != 204 {
		t.Errorf("delete at 2.2: %d", resp.StatusCode)
	}
	if resp := e.call("DELETE", "/compute/v2.1/os-keypairs/gen", "member", "2.2", nil, &fault); resp.StatusCode != 404 {
		t.Errorf("delete twice: %d", resp.StatusCode)
	}
}
