package identity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"keel/internal/apitest"
)

// identityShape is Keystone's error body: {"error": {code, message, title}}.
func identityShape(body []byte) error {
	var f struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Title   string `json:"title"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return err
	}
	if f.Error == nil || f.Error.Code == 0 || f.Error.Title == "" {
		return fmt.Errorf("no error {code, message, title}")
	}
	return nil
}

// FuzzLogin sends arbitrary login bodies: never a 5xx, errors in
// Keystone's shape, a token (201) only for the dev password, and an
// oversized body is a 413.
func FuzzLogin(f *testing.F) {
	f.Add([]byte(passwordAuth(adminByName, testPassword, projectScope("admin"))))
	f.Add([]byte(passwordAuth(demoByName, testPassword, "")))
	f.Add([]byte(passwordAuth(adminByName, "wrong", projectScope("admin"))))
	f.Add([]byte(passwordAuth(`{"name": "nobody", "domain": {"name": "Default"}}`, testPassword, projectScope("nothing"))))
	f.Add([]byte(`{"auth": {"identity": {"methods": ["token"], "token": {"id": "x"}}}}`))
	f.Add([]byte(`{"auth": {"identity": {"methods": ["password"], "password": {"user": {"id": 5}}}}}`))
	f.Add([]byte(`{"auth": {"identity": null, "scope": "system"}}`))
	f.Add([]byte(`{`))
	f.Add([]byte(``))
	f.Add(bytes.Repeat([]byte(" "), maxAuthBody+1))
	iss, _ := newTestIssuer(&testing.T{})
	h := iss.Handler("http://keel")
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/identity/v3/auth/tokens", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := apitest.Refused(t, h, req, func() string { return "" }, identityShape)
		if rec.Code == http.StatusCreated && !bytes.Contains(body, []byte(testPassword)) {
			t.Fatalf("a token for a body without the password: %s", body)
		}
		if len(body) > maxAuthBody && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("a %d-byte body: %d, want 413", len(body), rec.Code)
		}
	})
}
