package computeapi

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"keel/internal/records"
)

// TestParseCreate runs parseCreate on bodies as POST /servers gets them:
// what it reads into the request, and the 400s Nova's schema gives, all
// without a store.
func TestParseCreate(t *testing.T) {
	const group = "7f0c3e4a-9d62-4b0e-8f33-2a1d5c6b7e80"
	v257, v219 := Microversion{2, 57}, Microversion{2, 19}
	cases := []struct {
		name string
		mv   Microversion
		body string
		// want is checked field by field where set; wantErr is a part of
		// the 400's text.
		want    func(t *testing.T, req createRequest)
		wantErr string
	}{
		{name: "the smallest body", mv: MinVersion, body: `{"server": {"name": "a", "flavorRef": "1"}}`,
			want: func(t *testing.T, req createRequest) {
				want := createRequest{Server: records.Instance{Name: "a"}, FlavorRef: "1", MinCount: 1, MaxCount: 1}
				if !reflect.DeepEqual(req, want) {
					t.Fatalf("got %+v, want %+v", req, want)
				}
			}},
		{name: "links are read for their id; zone:host forces the host", mv: MaxVersion,
			body: `{"server": {"name": "a", "networks": "none", "flavorRef": "http://x/flavors/42", "imageRef": "http://x/images/img-1",
				"availability_zone": "az1:h3", "key_name": "k", "adminPass": "pw", "min_count": 2, "max_count": "3",
				"metadata": {"m": "v"}, "accessIPv4": "10.0.0.1", "OS-DCF:diskConfig": "AUTO", "description": "d",
				"return_reservation_id": true},
				"os:scheduler_hints": {"group": "` + group + `", "same_host": "` + group + `", "other": 1}}`,
			want: func(t *testing.T, req createRequest) {
				s := req.Server
				if req.FlavorRef != "42" || req.ImageRef != "http://x/images/img-1" || s.ImageRef != "img-1" {
					t.Fatalf("refs: %+v", req)
				}
				if s.Zone != "az1" || req.Host != "h3" || !req.Forced || req.KeyName == nil || *req.KeyName != "k" || req.AdminPass != "pw" {
					t.Fatalf("zone, host, key, password: %+v", req)
				}
				if req.MinCount != 2 || req.MaxCount != 3 || !req.ReturnReservationID {
					t.Fatalf("counts: %+v", req)
				}
				if s.Metadata["m"] != "v" || s.AccessIPv4 != "10.0.0.1" || s.DiskConfig != "AUTO" || s.Description != "d" {
					t.Fatalf("server fields: %+v", s)
				}
				if req.Hints == nil || req.Hints.Group != group || !reflect.DeepEqual(req.Hints.SameHost, []string{group}) {
					t.Fatalf("hints: %+v", req.Hints)
				}
			}},
		{name: "the older hints' name", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": 1}, "OS-SCH-HNT:scheduler_hints": {"different_host": ["` + group + `"]}}`,
			want: func(t *testing.T, req createRequest) {
				if req.FlavorRef != "1" || req.Hints == nil || !reflect.DeepEqual(req.Hints.DifferentHost, []string{group}) {
					t.Fatalf("got %+v", req)
				}
			}},
		{name: "personality before 2.57", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": "1", "personality": [{"path": "/etc/x", "contents": "aGk="}]}}`,
			want: func(t *testing.T, req createRequest) {
				if !reflect.DeepEqual(req.Personality, []personalityFile{{Path: "/etc/x", Contents: "aGk="}}) {
					t.Fatalf("personality %+v", req.Personality)
				}
			}},
		{name: "no server", mv: MinVersion, body: `{}`, wantErr: "'server' is a required property"},
		{name: "no name", mv: MinVersion, body: `{"server": {"flavorRef": "1"}}`, wantErr: "'name' is a required property"},
		{name: "a blank name", mv: MinVersion, body: `{"server": {"name": " a", "flavorRef": "1"}}`, wantErr: "name"},
		{name: "no flavor", mv: MinVersion, body: `{"server": {"name": "a"}}`, wantErr: "'flavorRef' is a required property"},
		{name: "key_name not a string", mv: MinVersion, body: `{"server": {"name": "a", "flavorRef": "1", "key_name": 3}}`,
			wantErr: "key_name. Value: 3. It is not of type 'string'"},
		{name: "personality from 2.57", mv: v257,
			body:    `{"server": {"name": "a", "flavorRef": "1", "networks": "none", "personality": []}}`,
			wantErr: "('personality' was unexpected)"},
		{name: "personality not base64", mv: MinVersion,
			body:    `{"server": {"name": "a", "flavorRef": "1", "personality": [{"path": "p", "contents": "a"}]}}`,
			wantErr: "is not a 'base64'"},
		{name: "a network", mv: MinVersion, body: `{"server": {"name": "a", "flavorRef": "1", "networks": [{"uuid": "n1"}]}}`,
			wantErr: "Network n1 could not be found"},
		{name: "an IPv4 address that is not one", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": "1", "accessIPv4": "::1"}}`, wantErr: "accessIPv4"},
		{name: "description before 2.19", mv: Microversion{2, 18},
			body: `{"server": {"name": "a", "flavorRef": "1", "description": "d"}}`, wantErr: "('description' was unexpected)"},
		{name: "a description too long", mv: v219,
			body:    `{"server": {"name": "a", "flavorRef": "1", "description": "` + strings.Repeat("x", 256) + `"}}`,
			wantErr: "longer than 255"},
		{name: "metadata not strings", mv: MinVersion, body: `{"server": {"name": "a", "flavorRef": "1", "metadata": {"k": 1}}}`,
			wantErr: "metadata"},
		{name: "a group that is not a UUID", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": "1"}, "os:scheduler_hints": {"group": "g1"}}`, wantErr: "It is not a valid UUID"},
		{name: "min_count above max_count", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": "1", "min_count": 3, "max_count": 2}}`, wantErr: "min_count must be <= max_count"},
		{name: "too many", mv: MinVersion, body: `{"server": {"name": "a", "flavorRef": "1", "max_count": 101}}`, wantErr: "at most 100"},
		{name: "return_reservation_id not a boolean", mv: MinVersion,
			body: `{"server": {"name": "a", "flavorRef": "1", "return_reservation_id": "yes"}}`, wantErr: "not a boolean"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/compute/v2.1/servers", strings.NewReader(tc.body))
			var body createBody
			if err := decodeStrict(r, &body); err != nil {
				t.Fatalf("decode: %v", err)
			}
			req, err := parseCreate(body, tc.mv)
			if tc.wantErr != "" {
				if err == nil || statusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v (status %d), want a 400 containing %q", err, statusOf(err), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want(t, req)
		})
	}
}
