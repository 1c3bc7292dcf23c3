package computeapi

import "net/http"

// goneRoutes are APIs Nova removed (nova-network, cells v1, cloudpipe,
// certificates, the XenAPI agents, the console proxies of os-consoles,
// fping, …): Nova answers them 410 Gone at every microversion, and so
// does keel, rather than a 404 that reads as a typo in the path.
var goneRoutes = []string{
	"GET /compute/v2.1/os-agents", "POST /compute/v2.1/os-agents",
	"PUT /compute/v2.1/os-agents/{id}", "DELETE /compute/v2.1/os-agents/{id}",
	"GET /compute/v2.1/os-cells", "POST /compute/v2.1/os-cells", "GET /compute/v2.1/os-cells/detail",
	"GET /compute/v2.1/os-cells/info", "GET /compute/v2.1/os-cells/capacities", "POST /compute/v2.1/os-cells/sync_instances",
	"GET /compute/v2.1/os-cells/{id}", "PUT /compute/v2.1/os-cells/{id}", "DELETE /compute/v2.1/os-cells/{id}",
	"GET /compute/v2.1/os-cells/{id}/capacities",
	"POST /compute/v2.1/os-certificates", "GET /compute/v2.1/os-certificates/{id}",
	"GET /compute/v2.1/os-cloudpipe", "POST /compute/v2.1/os-cloudpipe", "PUT /compute/v2.1/os-cloudpipe/{id}",
	"GET /compute/v2.1/servers/{id}/consoles", "POST /compute/v2.1/servers/{id}/consoles",
	"GET /compute/v2.1/servers/{id}/consoles/{console}", "DELETE /compute/v2.1/servers/{id}/consoles/{console}",
	"GET /compute/v2.1/os-fixed-ips/{id}", "POST /compute/v2.1/os-fixed-ips/{id}/action",
	"GET /compute/v2.1/os-floating-ip-dns", "PUT /compute/v2.1/os-floating-ip-dns/{id}", "DELETE /compute/v2.1/os-floating-ip-dns/{id}",
	"GET /compute/v2.1/os-floating-ip-dns/{domain}/entries/{id}", "PUT /compute/v2.1/os-floating-ip-dns/{domain}/entries/{id}",
	"DELETE /compute/v2.1/os-floating-ip-dns/{domain}/entries/{id}",
	"GET /compute/v2.1/os-floating-ips-bulk", "POST /compute/v2.1/os-floating-ips-bulk",
	"GET /compute/v2.1/os-floating-ips-bulk/{id}", "PUT /compute/v2.1/os-floating-ips-bulk/{id}",
	"GET /compute/v2.1/os-fping", "GET /compute/v2.1/os-fping/{id}",
	"POST /compute/v2.1/os-networks", "POST /compute/v2.1/os-networks/add", "DELETE /compute/v2.1/os-networks/{id}",
	"POST /compute/v2.1/os-networks/{id}/action",
	"POST /compute/v2.1/os-tenant-networks", "DELETE /compute/v2.1/os-tenant-networks/{id}",
	"GET /compute/v2.1/os-security-group-default-rules", "POST /compute/v2.1/os-security-group-default-rules",
	"GET /compute/v2.1/os-security-group-default-rules/{id}", "DELETE /compute/v2.1/os-security-group-default-rules/{id}",
	"GET /compute/v2.1/servers/{id}/os-virtual-interfaces",
}

// errGone is a removed API's answer: 410 with webob's words, as Nova's.
var errGone = &apiError{http.StatusGone, "This resource is no longer available.  No forwarding address is given."}

// gone answers a removed API.
func (a *API) gone(http.ResponseWriter, *http.Request) error { return errGone }
