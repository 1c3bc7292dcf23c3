package identity

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Region is the one region keel reports.
const Region = "RegionOne"

// Interfaces are the endpoint interfaces every service lists, in order.
var Interfaces = []string{"public", "internal", "admin"}

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

// CatalogOptions are what a deployment changes in the catalog: the base
// URLs of keel's internal and admin endpoints, and other services.
type CatalogOptions struct {
	// InternalURL and AdminURL are the base URLs (no trailing slash) keel's
	// services list as their internal and admin endpoints; empty means
	// the public base.
	InternalURL, AdminURL string
	// Services are other services' entries (Watcher's infra-optim, …):
	// each lists its URL as its public, internal and admin endpoint.
	Services []Service
}

// Service is another service the catalog lists (see ParseService).
type Service struct {
	Type, Name, URL string
}

// ParseService reads TYPE:NAME=URL (infra-optim:watcher=http://10.0.0.5:9322),
// the form of [keel] catalog_services.
func ParseService(s string) (Service, error) {
	head, u, ok := strings.Cut(strings.TrimSpace(s), "=")
	typ, name, ok2 := strings.Cut(head, ":")
	typ, name, u = strings.TrimSpace(typ), strings.TrimSpace(name), strings.TrimSpace(u)
	if !ok || !ok2 || typ == "" || name == "" {
		return Service{}, fmt.Errorf("service %q: want TYPE:NAME=URL, e.g. infra-optim:watcher=http://127.0.0.1:9322", s)
	}
	if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return Service{}, fmt.Errorf("service %q: the URL %q is not an http(s) URL", s, u)
	}
	return Service{Type: typ, Name: name, URL: strings.TrimRight(u, "/")}, nil
}

// Catalog lists keel's services for clients reaching it at base (no
// trailing slash): identity (base/identity/v3), compute "nova"
// (base/compute/v2.1), placement (base/placement) and image "glance"
// (base/image), then opt's other services; each has a public, an internal
// and an admin endpoint in RegionOne (keel's at opt's internal and admin
// bases when set). IDs are derived from the type and interface, so every
// replica and every token lists the same ones.
func Catalog(base string, opt CatalogOptions) []CatalogEntry {
	bases := map[string]string{"public": base, "internal": base, "admin": base}
	if opt.InternalURL != "" {
		bases["internal"] = strings.TrimRight(opt.InternalURL, "/")
	}
	if opt.AdminURL != "" {
		bases["admin"] = strings.TrimRight(opt.AdminURL, "/")
	}
	own := []struct{ typ, name, path string }{
		{"identity", "keystone", Prefix + "/v3"},
		{"compute", "nova", "/compute/v2.1"},
		{"placement", "placement", "/placement"},
		{"image", "glance", "/image"},
	}
	out := make([]CatalogEntry, 0, len(own)+len(opt.Services))
	for _, s := range own {
		out = append(out, entry(s.typ, s.name, func(iface string) string { return bases[iface] + s.path }))
	}
	for _, s := range opt.Services {
		out = append(out, entry(s.Type, s.Name, func(string) string { return s.URL }))
	}
	return out
}

func entry(typ, name string, url func(iface string) string) CatalogEntry {
	e := CatalogEntry{Type: typ, Name: name, ID: derivedID("service", "", typ)}
	for _, iface := range Interfaces {
		e.Endpoints = append(e.Endpoints, Endpoint{
			ID:        derivedID("endpoint", "", typ+"/"+iface),
			Interface: iface, Region: Region, RegionID: Region, URL: url(iface),
		})
	}
	return e
}

func (h *handler) catalog(r *http.Request) []CatalogEntry {
	return Catalog(baseURL(h.base, r), h.iss.Catalog)
}

// The services and endpoints resources (GET /v3/services, /v3/endpoints
// and each by ID), which `openstack service list` and `openstack endpoint
// list` read: the catalog seen as Keystone's tables. Admin only, as
// Keystone's policy.

func (h *handler) serviceJSON(r *http.Request, e CatalogEntry) map[string]any {
	return map[string]any{
		"id": e.ID, "type": e.Type, "name": e.Name, "enabled": true, "description": "",
		"links": map[string]string{"self": h.url(r, Prefix+"/v3/services/"+e.ID)},
	}
}

func (h *handler) endpointJSON(r *http.Request, e CatalogEntry, ep Endpoint) map[string]any {
	return map[string]any{
		"id": ep.ID, "interface": ep.Interface, "region": ep.Region, "region_id": ep.RegionID,
		"service_id": e.ID, "url": ep.URL, "enabled": true,
		"links": map[string]string{"self": h.url(r, Prefix+"/v3/endpoints/"+ep.ID)},
	}
}

func (h *handler) listServices(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "list_services")
		return
	}
	q := r.URL.Query()
	out := []map[string]any{}
	for _, e := range h.catalog(r) {
		if (!q.Has("type") || q.Get("type") == e.Type) && (!q.Has("name") || q.Get("name") == e.Name) {
			out = append(out, h.serviceJSON(r, e))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"services": out, "links": h.collectionLinks(r)})
}

func (h *handler) showService(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "get_service")
		return
	}
	for _, e := range h.catalog(r) {
		if e.ID == r.PathValue("id") {
			writeJSON(w, http.StatusOK, map[string]any{"service": h.serviceJSON(r, e)})
			return
		}
	}
	WriteError(w, http.StatusNotFound, "Could not find service: "+r.PathValue("id")+".")
}

func (h *handler) listEndpoints(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "list_endpoints")
		return
	}
	q := r.URL.Query()
	out := []map[string]any{}
	for _, e := range h.catalog(r) {
		for _, ep := range e.Endpoints {
			if (!q.Has("service_id") || q.Get("service_id") == e.ID) &&
				(!q.Has("interface") || q.Get("interface") == ep.Interface) &&
				(!q.Has("region_id") || q.Get("region_id") == ep.RegionID) {
				out = append(out, h.endpointJSON(r, e, ep))
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"endpoints": out, "links": h.collectionLinks(r)})
}

func (h *handler) showEndpoint(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "get_endpoint")
		return
	}
	for _, e := range h.catalog(r) {
		for _, ep := range e.Endpoints {
			if ep.ID == r.PathValue("id") {
				writeJSON(w, http.StatusOK, map[string]any{"endpoint": h.endpointJSON(r, e, ep)})
				return
			}
		}
	}
	WriteError(w, http.StatusNotFound, "Could not find endpoint: "+r.PathValue("id")+".")
}
