package computeapi

import "net/http"

// legacyVersionEntry is the v2.0 entry Nova lists first in GET /compute/:
// the pre-microversion API, SUPPORTED, with no version range. keel serves
// only v2.1 (with 2.1 as its floor); the entry is there because clients
// (Tempest's test_list_api_versions among them) expect Nova's list.
func (a *API) legacyVersionEntry() map[string]any {
	return map[string]any{
		"id": "v2.0", "status": "SUPPORTED", "version": "", "min_version": "",
		"updated": "2011-01-21T11:33:21Z",
		"links":   []map[string]string{{"rel": "self", "href": a.baseURL + "/v2/"}},
	}
}

// legacyVersion is GET /compute/v2/: the v2.0 entry's own document (its
// self link is the one the version list gives).
func (a *API) legacyVersion(w http.ResponseWriter, _ *http.Request) {
	v := a.legacyVersionEntry()
	v["media-types"] = []map[string]string{{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2"}}
	writeJSON(w, http.StatusOK, map[string]any{"version": v})
}
