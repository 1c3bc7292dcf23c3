package computeapi

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"keel/internal/clock"
	"keel/internal/httpbody"
	"keel/internal/httproute"
	"keel/internal/image"
	"keel/internal/records"
	"keel/internal/requestid"
	"keel/internal/store"
)

// Caller is who makes a request, as the identity middleware established.
type Caller struct {
	UserID, ProjectID string
	Admin             bool
}

// Config wires the API.
type Config struct {
	Store     Store
	Conductor Conductor
	Clock     clock.Clock
	// ServiceDownTime is [DEFAULT] service_down_time: a service whose last
	// heartbeat is older is reported down.
	ServiceDownTime time.Duration
	// BaseURL is the externally visible URL of /compute (for links).
	BaseURL string
	// Caller returns the authenticated caller; the handler answers 401
	// when it reports false.
	Caller func(r *http.Request) (Caller, bool)
	// Image returns what a boot checks of the image an ID names, and
	// whether it names an image the caller (the request's, in ctx) can
	// boot servers from; nil accepts any image and checks nothing.
	Image func(ctx context.Context, id string) (BootImage, bool)
	// Images is the image service the image proxy (/images, up to 2.35)
	// reads and changes; nil: no proxy (404). ImageURL is the image
	// service's base URL, for the proxy's alternate links.
	Images   *image.Store
	ImageURL string
	// Rand is where generated key pairs draw from (crypto/rand if nil).
	Rand io.Reader
	Log  *slog.Logger
	// Hosts, if set, is what the hypervisor calls read instead of
	// listing every host record and service from Store each time.
	Hosts HostLister
}

// HostLister is a current picture of every host record and compute
// service: the server's host view, which follows the store's change
// stream and so re-reads only what changed since it was last asked.
type HostLister interface {
	// ComputeHosts returns every host record, sorted by host, and the
	// compute services by host, as of the call: whatever was committed
	// before it is in. The records are the caller's to read, not change.
	ComputeHosts(ctx context.Context) ([]records.HostRecord, map[string]records.Service, error)
}

// API is the compute API handler: the version documents, the identity
// and microversion checks every route shares, and the routes, each served
// by one handler family below (Nova's controllers), which holds only what
// it reads.
type API struct {
	caller  func(r *http.Request) (Caller, bool)
	log     *slog.Logger
	baseURL string
	mux     *http.ServeMux

	flavors         *flavorsAPI
	servers         *serversAPI
	serverTags      *serverTagsAPI
	serverMetadata  *serverMetadataAPI
	serverActions   *serverActionsAPI
	instanceActions *instanceActionsAPI
	migrations      *migrationsAPI
	hypervisors     *hypervisorsAPI
	services        *servicesAPI
	zones           *zonesAPI
	osHosts         *osHostsAPI
	aggregates      *aggregatesAPI
	serverGroups    *serverGroupsAPI
	quotas          *quotasAPI
	keyPairs        *keyPairsAPI
	usage           *usageAPI
	images          *imagesAPI
}

// base is what the handler families over instances, hosts and moves
// read: the whole Store, the clock, the log, the links and when a service
// counts as down. Its methods are the lookups and views more than one
// family shares. Families that need less (flavors, key pairs, the image
// proxy) hold only that, not a base.
type base struct {
	links
	store           Store
	clock           clock.Clock
	log             *slog.Logger
	serviceDownTime time.Duration
}

// links makes the views' links from the API's externally visible base
// URL.
type links struct{ baseURL string }

// flavorsAPI serves /flavors, their extra specs and access lists: the
// flavor store role is all it reads and writes.
type flavorsAPI struct {
	links
	store store.Flavors
}

// serversAPI serves /servers: create, list, show, update, delete, the
// addresses, diagnostics and external events.
type serversAPI struct {
	*base
	conductor booter
	image     func(ctx context.Context, id string) (BootImage, bool)
}

// serverTagsAPI serves /servers/{id}/tags.
type serverTagsAPI struct{ *base }

// serverMetadataAPI serves /servers/{id}/metadata.
type serverMetadataAPI struct{ *base }

// serverActionsAPI serves POST /servers/{id}/action.
type serverActionsAPI struct {
	*base
	conductor Conductor
	image     func(ctx context.Context, id string) (BootImage, bool)
	// images and imageURL: where createImage and createBackup write.
	images   *image.Store
	imageURL string
}

// instanceActionsAPI serves /servers/{id}/os-instance-actions.
type instanceActionsAPI struct{ *base }

// migrationsAPI serves /os-migrations and /servers/{id}/migrations.
type migrationsAPI struct {
	*base
	conductor mover
}

// hypervisorsAPI serves /os-hypervisors.
type hypervisorsAPI struct {
	*base
	hosts    HostLister
	listings *listingCache // the large unpaged listings, kept
}

// servicesAPI serves /os-services.
type servicesAPI struct{ *base }

// zonesAPI serves /os-availability-zone.
type zonesAPI struct{ *base }

// osHostsAPI serves /os-hosts.
type osHostsAPI struct{ *base }

// aggregatesAPI serves /os-aggregates.
type aggregatesAPI struct{ *base }

// serverGroupsAPI serves /os-server-groups.
type serverGroupsAPI struct{ *base }

// quotasAPI serves /os-quota-sets, /os-quota-class-sets and /limits.
type quotasAPI struct{ *base }

// keyPairsAPI serves /os-keypairs: over the key pairs and the quota
// limits that cap them.
type keyPairsAPI struct {
	store   keyPairStore
	clock   clock.Clock
	baseURL string
	rand    io.Reader
}

// keyPairStore is what os-keypairs reads and writes of the store.
type keyPairStore interface {
	store.KeyPairs
	store.Quotas
}

// usageAPI serves /os-simple-tenant-usage and /os-instance_usage_audit_log.
type usageAPI struct{ *base }

type ctxKey int

const (
	keyVersion ctxKey = iota
	keyCaller
)

// New builds the handler; mount it at /compute/.
func New(cfg Config) *API {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	l := links{baseURL: cfg.BaseURL}
	b := &base{links: l, store: cfg.Store, clock: cfg.Clock, log: cfg.Log, serviceDownTime: cfg.ServiceDownTime}
	a := &API{
		caller: cfg.Caller, log: cfg.Log, baseURL: cfg.BaseURL, mux: http.NewServeMux(),
		flavors:         &flavorsAPI{links: l, store: cfg.Store},
		servers:         &serversAPI{base: b, conductor: cfg.Conductor, image: cfg.Image},
		serverTags:      &serverTagsAPI{b},
		serverMetadata:  &serverMetadataAPI{b},
		serverActions:   &serverActionsAPI{base: b, conductor: cfg.Conductor, image: cfg.Image, images: cfg.Images, imageURL: cfg.ImageURL},
		instanceActions: &instanceActionsAPI{b},
		migrations:      &migrationsAPI{base: b, conductor: cfg.Conductor},
		hypervisors:     &hypervisorsAPI{base: b, hosts: cfg.Hosts, listings: newListingCache(b.now)},
		services:        &servicesAPI{b},
		zones:           &zonesAPI{b},
		osHosts:         &osHostsAPI{b},
		aggregates:      &aggregatesAPI{b},
		serverGroups:    &serverGroupsAPI{b},
		quotas:          &quotasAPI{b},
		keyPairs:        &keyPairsAPI{store: cfg.Store, clock: cfg.Clock, baseURL: cfg.BaseURL, rand: cfg.Rand},
		usage:           &usageAPI{b},
		images:          &imagesAPI{links: l, images: cfg.Images, imageURL: cfg.ImageURL},
	}
	a.routes()
	return a
}

func (a *API) routes() {
	m := a.mux
	m.HandleFunc("GET /compute", a.versions)
	m.HandleFunc("GET /compute/{$}", a.versions)
	m.HandleFunc("GET /compute/v2.1", a.version)
	m.HandleFunc("GET /compute/v2.1/{$}", a.version)
	m.HandleFunc("GET /compute/v2", a.legacyVersion)
	m.HandleFunc("GET /compute/v2/{$}", a.legacyVersion)
	route := func(pattern string, admin bool, h func(w http.ResponseWriter, r *http.Request) error) {
		m.HandleFunc(pattern, a.authed(admin, pattern, h))
	}
	route("GET /compute/v2.1/flavors", false, a.flavors.listFlavors(false))
	route("GET /compute/v2.1/flavors/detail", false, a.flavors.listFlavors(true))
	route("GET /compute/v2.1/flavors/{id}", false, a.flavors.showFlavor)
	route("GET /compute/v2.1/flavors/{id}/os-extra_specs", false, a.flavors.flavorExtraSpecs)
	route("POST /compute/v2.1/flavors/{id}/os-extra_specs", true, a.flavors.setExtraSpecs)
	route("GET /compute/v2.1/flavors/{id}/os-extra_specs/{key}", false, a.flavors.showExtraSpec)
	route("PUT /compute/v2.1/flavors/{id}/os-extra_specs/{key}", true, a.flavors.putExtraSpec)
	route("DELETE /compute/v2.1/flavors/{id}/os-extra_specs/{key}", true, a.flavors.deleteExtraSpec)
	route("POST /compute/v2.1/flavors", true, a.flavors.createFlavor)
	route("DELETE /compute/v2.1/flavors/{id}", true, a.flavors.deleteFlavor)

	route("POST /compute/v2.1/servers", false, a.servers.createServer)
	route("GET /compute/v2.1/servers", false, a.servers.listServers(false))
	route("GET /compute/v2.1/servers/detail", false, a.servers.listServers(true))
	route("GET /compute/v2.1/servers/{id}", false, a.servers.showServer)
	route("DELETE /compute/v2.1/servers/{id}", false, a.servers.deleteServer)
	route("PUT /compute/v2.1/servers/{id}", false, a.servers.updateServer)
	route("POST /compute/v2.1/servers/{id}/action", false, a.serverActions.serverAction)
	route("GET /compute/v2.1/servers/{id}/ips", false, a.servers.listAddresses)
	route("GET /compute/v2.1/servers/{id}/ips/{network}", false, a.servers.showNetworkAddresses)
	route("GET /compute/v2.1/servers/{id}/tags", false, a.serverTags.listTags)
	route("PUT /compute/v2.1/servers/{id}/tags", false, a.serverTags.replaceTags)
	route("DELETE /compute/v2.1/servers/{id}/tags", false, a.serverTags.deleteTags)
	route("GET /compute/v2.1/servers/{id}/tags/{tag}", false, a.serverTags.checkTagExists)
	route("PUT /compute/v2.1/servers/{id}/tags/{tag}", false, a.serverTags.addTag)
	route("DELETE /compute/v2.1/servers/{id}/tags/{tag}", false, a.serverTags.deleteTag)
	route("GET /compute/v2.1/servers/{id}/os-instance-actions", false, a.instanceActions.listInstanceActions)
	route("GET /compute/v2.1/servers/{id}/os-instance-actions/{rid}", false, a.instanceActions.showInstanceAction)
	route("GET /compute/v2.1/servers/{id}/migrations", true, a.migrations.listServerMigrations)
	route("GET /compute/v2.1/servers/{id}/migrations/{mid}", true, a.migrations.showServerMigration)
	route("DELETE /compute/v2.1/servers/{id}/migrations/{mid}", true, a.migrations.abortServerMigration)
	route("POST /compute/v2.1/servers/{id}/migrations/{mid}/action", true, a.migrations.serverMigrationAction)

	route("GET /compute/v2.1/os-migrations", true, a.migrations.listMigrations)
	route("GET /compute/v2.1/os-hypervisors", true, a.hypervisors.listHypervisors(false))
	route("GET /compute/v2.1/os-hypervisors/detail", true, a.hypervisors.listHypervisors(true))
	route("GET /compute/v2.1/os-hypervisors/{id}", true, a.hypervisors.showHypervisor)
	route("GET /compute/v2.1/os-hypervisors/statistics", true, a.hypervisors.hypervisorStatistics)
	route("GET /compute/v2.1/os-hypervisors/{id}/uptime", true, a.hypervisors.hypervisorUptime)
	route("GET /compute/v2.1/os-hypervisors/{id}/search", true, a.hypervisors.searchHypervisors(false))
	route("GET /compute/v2.1/os-hypervisors/{id}/servers", true, a.hypervisors.searchHypervisors(true))
	route("GET /compute/v2.1/os-availability-zone", false, a.zones.listZones(false))
	route("GET /compute/v2.1/os-availability-zone/detail", true, a.zones.listZones(true))
	for _, p := range goneRoutes {
		route(p, false, a.gone)
	}
	route("GET /compute/v2.1/extensions", false, a.listExtensions)
	route("GET /compute/v2.1/extensions/{alias}", false, a.showExtension)
	route("GET /compute/v2.1/os-services", true, a.services.listServices)
	route("PUT /compute/v2.1/os-services/{action}", true, a.services.updateService)
	route("DELETE /compute/v2.1/os-services/{id}", true, a.services.deleteService)
	a.aggregates.aggregateRoutes(route)
	a.serverGroups.serverGroupRoutes(route)
	a.quotas.quotaRoutes(route)
	a.flavors.flavorAccessRoutes(route)
	a.serverMetadata.serverMetadataRoutes(route)
	a.keyPairs.keyPairRoutes(route)
	a.usage.usageRoutes(route)
	a.osHosts.osHostsRoutes(route)
	a.images.imageRoutes(route)
	route("GET /compute/v2.1/servers/{id}/diagnostics", true, a.servers.serverDiagnostics)
	route("GET /compute/v2.1/servers/{id}/os-server-password", false, a.servers.showServerPassword)
	route("DELETE /compute/v2.1/servers/{id}/os-server-password", false, a.servers.clearServerPassword)
	route("POST /compute/v2.1/os-server-external-events", true, a.servers.serverExternalEvents)
	route("GET /compute/v2.1/os-instance_usage_audit_log", true, a.usage.instanceUsageAuditLog(false))
	route("GET /compute/v2.1/os-instance_usage_audit_log/{before}", true, a.usage.instanceUsageAuditLog(true))
}

// ServeHTTP implements http.Handler: every response carries the
// microversion headers and a request id.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := requestid.Ensure(w)
	w.Header().Set("X-Compute-Request-Id", reqID)
	v, err := parseVersion(r.Header)
	if err != nil {
		a.setVersionHeaders(w, MaxVersion)
		status := http.StatusNotAcceptable
		var mv *malformedVersion
		if errors.As(err, &mv) {
			status = http.StatusBadRequest
		}
		WriteError(w, status, err.Error())
		return
	}
	a.setVersionHeaders(w, v)
	ctx := r.Context()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// A request that changes something runs to its end whether or not
		// the client still waits (an openstackclient timeout, a load
		// balancer): half a boot or half a move, or an instance action
		// never recorded, is worse than an answer nobody reads.
		ctx = context.WithoutCancel(ctx)
	}
	r = r.WithContext(context.WithValue(ctx, keyVersion, v))
	if miss, status, allow := httproute.Miss(a.mux, r); miss {
		if allow != "" {
			w.Header().Set("Allow", allow)
		}
		WriteError(w, status, http.StatusText(status))
		return
	}
	a.mux.ServeHTTP(w, r)
}

func (a *API) setVersionHeaders(w http.ResponseWriter, v Microversion) {
	w.Header().Set("X-OpenStack-Nova-API-Version", v.String())
	w.Header().Set("OpenStack-API-Version", "compute "+v.String())
	w.Header().Set("Vary", "OpenStack-API-Version, X-OpenStack-Nova-API-Version")
}

func version(r *http.Request) Microversion {
	v, _ := r.Context().Value(keyVersion).(Microversion)
	if v.Major == 0 {
		return MinVersion
	}
	return v
}

func caller(r *http.Request) Caller {
	c, _ := r.Context().Value(keyCaller).(Caller)
	return c
}

// authed wraps a handler: 401 without a valid caller, 403 for a member on
// an admin action, and errors rendered in Nova's shape.
func (a *API) authed(admin bool, pattern string, h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	action := "os_compute_api:" + strings.TrimPrefix(strings.Fields(pattern)[1], "/compute/v2.1/")
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.caller(r)
		if !ok {
			WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
			return
		}
		if admin && !c.Admin {
			WriteError(w, http.StatusForbidden, forbidden(action).Error())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), keyCaller, c))
		if err := h(w, r); err != nil {
			status := statusOf(err)
			if status >= 500 {
				a.log.Error("compute API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			WriteError(w, status, err.Error())
		}
	}
}

// decode reads a JSON body into v; a malformed body is a 400.
func decode(r *http.Request, v any) error {
	return decodeWith(r, v, httpbody.DecodeJSON, "Malformed request body: ")
}

// decodeStrict is decode for bodies whose schema Nova closes
// (additionalProperties false): an unknown field is a 400.
func decodeStrict(r *http.Request, v any) error {
	return decodeWith(r, v, httpbody.DecodeJSONStrict, "Invalid input for the request body: ")
}

// decodeWith maps a body reader's failures to Nova's answers: 413 for a
// body over the limit, else 400 with the reason after prefix.
func decodeWith(r *http.Request, v any, read func(*http.Request, int64, any) error, prefix string) error {
	if err := read(r, httpbody.DefaultLimit, v); err != nil {
		if httpbody.IsTooLarge(err) {
			return &apiError{http.StatusRequestEntityTooLarge, "Request is too large."}
		}
		return badRequest(prefix + err.Error())
	}
	return nil
}

func (a links) link(kind, id string) []map[string]string {
	return []map[string]string{
		{"rel": "self", "href": a.baseURL + "/v2.1/" + kind + "/" + id},
		{"rel": "bookmark", "href": a.baseURL + "/" + kind + "/" + id},
	}
}

func (a *API) versionEntry() map[string]any {
	return map[string]any{
		"id": "v2.1", "status": "CURRENT", "version": MaxVersion.String(), "min_version": MinVersion.String(),
		"updated": "2013-07-23T11:33:21Z",
		"links":   []map[string]string{{"rel": "self", "href": a.baseURL + "/v2.1/"}},
	}
}

func (a *API) versions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"versions": []any{a.legacyVersionEntry(), a.versionEntry()}})
}

func (a *API) version(w http.ResponseWriter, _ *http.Request) {
	v := a.versionEntry()
	v["media-types"] = []map[string]string{{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}}
	writeJSON(w, http.StatusOK, map[string]any{"version": v})
}

// timeStr renders Nova's timestamps ("2026-11-30T12:00:00Z").
func timeStr(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// intID gives a host a stable integer id for microversions before 2.53.
func intID(host string) int64 { return int64(crc32.ChecksumIEEE([]byte(host)) & 0x7fffffff) }

func (a *base) serviceUp(s records.Service) bool {
	if s.ForcedDown {
		return false
	}
	return a.serviceDownTime <= 0 || a.clock.Now().Sub(s.LastSeenUp) <= a.serviceDownTime
}

func notFoundf(format string, args ...any) error { return notFound(fmt.Sprintf(format, args...)) }

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
