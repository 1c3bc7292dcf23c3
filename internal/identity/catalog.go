package identity

// Region is the one region keel reports.
const Region = "RegionOne"

// CatalogEntry is one service in a token's catalog.
type CatalogEntry struct {
	Type      string     `json:"type"`
	Name      string     `json:"name"`
	ID        string     `json:"id"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is one URL of a service.
type Endpoint struct {
	ID        string `json:"id"`
	Interface string `json:"interface"`
	Region    string `json:"region"`
	RegionID  string `json:"region_id"`
	URL       string `json:"url"`
}

// Catalog lists keel's services for clients reaching it at base (no
// trailing slash): identity (base/identity/v3), compute "nova"
// (base/compute/v2.1), placement (base/placement) and image "glance"
// (base/image), each with one public endpoint in RegionOne. IDs are fixed.
func Catalog(base string) []CatalogEntry {
	services := []struct{ typ, name, path string }{
		{"identity", "keystone", Prefix + "/v3"},
		{"compute", "nova", "/compute/v2.1"},
		{"placement", "placement", "/placement"},
		{"image", "glance", "/image"},
	}
	out := make([]CatalogEntry, len(services))
	for k, s := range services {
		out[k] = CatalogEntry{
			Type: s.typ, Name: s.name, ID: derivedID("service", "", s.typ),
			Endpoints: []Endpoint{{
				ID:        derivedID("endpoint", "", s.typ+"/public"),
				Interface: "public", Region: Region, RegionID: Region,
				URL: base + s.path,
			}},
		}
	}
	return out
}
