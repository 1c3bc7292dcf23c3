package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/sim/scenario"
)

// The microversions the Nova reader and executor use. Compute 2.53 names
// hypervisors and services by UUID (a hypervisor's id is its resource
// provider's UUID); 2.47 embeds the flavor in a server; 2.64 gives a
// server group's policy and rules. Placement 1.14 has provider trees.
const (
	NovaReadMicroversion  = "2.53"
	NovaGroupMicroversion = "2.64"
	MinPlacementVersion   = 14 // 1.14
	placementMicroversion = "1.14"
	novaServerPageSize    = 1000
	// readParallel is how many Placement reads ReadNova runs at once.
	readParallel = 8
)

// IsKeel reports whether the cloud is keel (it serves keel's admin API
// next to its compute API) rather than another OpenStack compute service.
func (c *Client) IsKeel(ctx context.Context) (bool, error) {
	_, err := c.keel.Get(ctx, c.keel.ServiceURL("plans"), nil, &gophercloud.RequestOpts{OkCodes: []int{200}, KeepResponseBody: false})
	switch {
	case err == nil:
		return true, nil
	case gophercloud.ResponseCodeIs(err, 403) || gophercloud.ResponseCodeIs(err, 401):
		return true, nil
	case gophercloud.ResponseCodeIs(err, 404) || gophercloud.ResponseCodeIs(err, 300):
		return false, nil
	}
	return false, c.unreachable(err)
}

// unreachable describes an error of the first call to a cloud.
func (c *Client) unreachable(err error) error {
	return fmt.Errorf("cloud %q at %s does not answer as OpenStack compute: %w (check the endpoint in clouds.yaml and that the service runs)", c.cloud, c.compute.Endpoint, describe(err))
}

// at returns a copy of sc asking for microversion v.
func at(sc *gophercloud.ServiceClient, v string) *gophercloud.ServiceClient {
	cp := *sc
	cp.Microversion = v
	return &cp
}

// NovaHost is a compute host of a Nova cloud: its hypervisor, its
// resource provider (the truth about inventories and usage) and its
// nova-compute service.
type NovaHost struct {
	Name         string                `json:"name"` // the service's host
	Hypervisor   string                `json:"hypervisor_hostname"`
	ProviderUUID string                `json:"provider_uuid"`
	Generation   int64                 `json:"generation"`
	Inventories  placement.Inventories `json:"inventories"`
	Used         placement.Resources   `json:"used"`
	Traits       []string              `json:"traits,omitempty"`
	Zone         string                `json:"zone"`
	Disabled     bool                  `json:"disabled"`
	ForcedDown   bool                  `json:"forced_down"`
	Up           bool                  `json:"up"`
}

// NovaServer is a server as the Nova reader sees it.
type NovaServer struct {
	UUID      string         `json:"uuid"`
	Name      string         `json:"name"`
	Host      string         `json:"host"`
	Status    string         `json:"status"`
	VMState   string         `json:"vm_state"`
	TaskState string         `json:"task_state"`
	Zone      string         `json:"zone"`
	Flavor    records.Flavor `json:"flavor"`
}

// NovaCloud is what the reader read from a Nova cloud's compute API and
// Placement.
type NovaCloud struct {
	TakenAt    time.Time
	Hosts      []NovaHost
	Servers    []NovaServer
	Groups     []records.ServerGroup
	Aggregates []records.Aggregate
	// Allocations are every consumer's allocations on the hosts'
	// providers: consumer UUID → provider UUID → resources. A server's
	// consumer is its UUID; a move in flight holds its source under its
	// migration's UUID.
	Allocations map[string]map[string]placement.Resources
}

// Host returns the host named name.
func (n *NovaCloud) Host(name string) (*NovaHost, bool) {
	for i := range n.Hosts {
		if n.Hosts[i].Name == name {
			return &n.Hosts[i], true
		}
	}
	return nil, false
}

// HostOfProvider returns the host whose provider is uuid.
func (n *NovaCloud) HostOfProvider(uuid string) (*NovaHost, bool) {
	for i := range n.Hosts {
		if n.Hosts[i].ProviderUUID == uuid {
			return &n.Hosts[i], true
		}
	}
	return nil, false
}

// Server returns the server with UUID uuid.
func (n *NovaCloud) Server(uuid string) (*NovaServer, bool) {
	for i := range n.Servers {
		if n.Servers[i].UUID == uuid {
			return &n.Servers[i], true
		}
	}
	return nil, false
}

// placementClient returns the placement client, or why there is none.
func (c *Client) placementClient() (*gophercloud.ServiceClient, error) {
	if c.placement == nil {
		if c.placementErr != nil {
			return nil, c.placementErr
		}
		return nil, fmt.Errorf("cloud %q has no placement endpoint: set placement_endpoint_override in clouds.yaml", c.cloud)
	}
	return at(c.placement, placementMicroversion), nil
}

// CheckPlacement checks that Placement answers and serves the
// microversions keel needs.
func (c *Client) CheckPlacement(ctx context.Context) error {
	pl, err := c.placementClient()
	if err != nil {
		return err
	}
	var body struct {
		Versions []struct {
			MaxVersion string `json:"max_version"`
		} `json:"versions"`
	}
	root := at(pl, "")
	if _, err := root.Get(ctx, pl.Endpoint, &body, &gophercloud.RequestOpts{OkCodes: []int{200}}); err != nil {
		return fmt.Errorf("placement at %s does not answer: %w (check placement_endpoint_override or the catalog)", pl.Endpoint, describe(err))
	}
	if len(body.Versions) == 0 {
		return fmt.Errorf("placement at %s lists no API version: is it Placement?", pl.Endpoint)
	}
	mv := body.Versions[0].MaxVersion
	minor, err := strconv.Atoi(strings.TrimPrefix(mv, "1."))
	if err != nil || minor < MinPlacementVersion {
		return fmt.Errorf("placement at %s serves microversions up to %s; keel needs 1.%d (provider trees, Placement from OpenStack Rocky on): upgrade Placement", pl.Endpoint, mv, MinPlacementVersion)
	}
	return nil
}

// NovaMinMicroversion is the oldest compute API keel drives: 2.64 (Nova
// Stein) — hypervisors and services by UUID, os-migrateLive with a host
// checked by the scheduler and block_migration auto, server groups with
// their policy and rules.
const NovaMinMicroversion = 64

// CheckNova checks that the compute endpoint is an OpenStack compute API
// v2.1 serving at least microversion 2.NovaMinMicroversion.
func (c *Client) CheckNova(ctx context.Context) error {
	var body struct {
		Version struct {
			ID      string `json:"id"`
			Version string `json:"version"`
		} `json:"version"`
	}
	root := at(c.compute, "")
	_, err := root.Get(ctx, c.compute.Endpoint, &body, &gophercloud.RequestOpts{OkCodes: []int{200}})
	if gophercloud.ResponseCodeIs(err, 404) {
		// An endpoint with the project in its path (…/v2.1/PROJECT): the
		// version document is one level up.
		parent := c.compute.Endpoint[:strings.LastIndex(strings.TrimSuffix(c.compute.Endpoint, "/"), "/")+1]
		_, err = root.Get(ctx, parent, &body, &gophercloud.RequestOpts{OkCodes: []int{200}})
	}
	if err != nil {
		return c.unreachable(err)
	}
	if body.Version.ID != "v2.1" {
		return fmt.Errorf("cloud %q: %s does not answer as an OpenStack compute API v2.1 (no version document): is compute_endpoint_override (or the catalog's compute endpoint) Nova's /v2.1?", c.cloud, c.compute.Endpoint)
	}
	minor, perr := strconv.Atoi(strings.TrimPrefix(body.Version.Version, "2."))
	if perr != nil || minor < NovaMinMicroversion {
		return fmt.Errorf("cloud %q: its compute API serves microversions up to %q; keel needs 2.%d (Nova 19, Stein, or later)", c.cloud, body.Version.Version, NovaMinMicroversion)
	}
	return nil
}

// ReadNova reads a Nova cloud: hypervisors and their resource providers
// (inventories, usages, traits, every allocation), nova-compute services,
// every server of every project with its host and flavor, aggregates and
// server groups. Notes say what was left out. It needs an admin user.
func (c *Client) ReadNova(ctx context.Context) (NovaCloud, []string, error) {
	var notes []string
	if err := c.CheckNova(ctx); err != nil {
		return NovaCloud{}, nil, err
	}
	if err := c.CheckPlacement(ctx); err != nil {
		return NovaCloud{}, nil, err
	}
	n := NovaCloud{TakenAt: time.Now().UTC(), Allocations: map[string]map[string]placement.Resources{}}
	cc := at(c.compute, NovaReadMicroversion)

	// Hypervisors (admin): the host name and provider UUID of each.
	type hypervisors struct {
		Hypervisors []struct {
			ID       string `json:"id"`
			Hostname string `json:"hypervisor_hostname"`
			State    string `json:"state"`
			Status   string `json:"status"`
			Service  struct {
				Host string `json:"host"`
			} `json:"service"`
		} `json:"hypervisors"`
	}
	var hv hypervisors
	// From 2.33 Nova answers at most [api] max_limit hypervisors a page
	// (1,000 by default): follow the pages.
	for marker := ""; ; {
		q := url.Values{"limit": {strconv.Itoa(novaServerPageSize)}}
		if marker != "" {
			q.Set("marker", marker)
		}
		var page hypervisors
		if _, err := cc.Get(ctx, cc.ServiceURL("os-hypervisors", "detail")+"?"+q.Encode(), &page, nil); err != nil {
			return NovaCloud{}, nil, c.adminError("listing hypervisors (os-hypervisors)", err)
		}
		hv.Hypervisors = append(hv.Hypervisors, page.Hypervisors...)
		if len(page.Hypervisors) < novaServerPageSize {
			break
		}
		marker = page.Hypervisors[len(page.Hypervisors)-1].ID
	}
	// Services: disabled, forced down, zone.
	svcs, err := c.novaServices(ctx)
	if err != nil {
		return NovaCloud{}, nil, err
	}
	pl, _ := c.placementClient()
	// Each host's provider is read by its own goroutine, up to
	// readParallel at a time, into its own allocations map.
	hosts := make([]NovaHost, len(hv.Hypervisors))
	allocs := make([]map[string]map[string]placement.Resources, len(hosts))
	errs := make([]error, len(hosts))
	sem := make(chan struct{}, readParallel)
	var wg sync.WaitGroup
	for i, h := range hv.Hypervisors {
		host := NovaHost{Name: h.Service.Host, Hypervisor: h.Hostname, ProviderUUID: h.ID, Zone: "nova", Up: h.State == "up", Disabled: h.Status == "disabled"}
		if host.Name == "" {
			host.Name = h.Hostname
		}
		for _, s := range svcs {
			if s.Host == host.Name {
				host.Zone, host.Disabled, host.ForcedDown, host.Up = s.Zone, s.Status == "disabled", s.ForcedDown, s.State == "up"
			}
		}
		hosts[i], allocs[i] = host, map[string]map[string]placement.Resources{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = c.readProvider(ctx, pl, &hosts[i], allocs[i])
		}()
	}
	wg.Wait()
	for i, h := range hv.Hypervisors {
		if err := errs[i]; err != nil {
			if isNotFound(err) {
				notes = append(notes, fmt.Sprintf("host %s left out: placement has no resource provider %s (its hypervisor's id)", hosts[i].Name, h.ID))
				continue
			}
			return NovaCloud{}, notes, err
		}
		n.Hosts = append(n.Hosts, hosts[i])
		for consumer, a := range allocs[i] {
			if n.Allocations[consumer] == nil {
				n.Allocations[consumer] = map[string]placement.Resources{}
			}
			maps.Copy(n.Allocations[consumer], a)
		}
	}
	slices.SortFunc(n.Hosts, func(a, b NovaHost) int { return strings.Compare(a.Name, b.Name) })

	servers, err := c.novaServers(ctx)
	if err != nil {
		return NovaCloud{}, notes, err
	}
	n.Servers = servers

	var ag struct {
		Aggregates []struct {
			ID       int64             `json:"id"`
			UUID     string            `json:"uuid"`
			Name     string            `json:"name"`
			Hosts    []string          `json:"hosts"`
			Metadata map[string]string `json:"metadata"`
		} `json:"aggregates"`
	}
	if _, err := cc.Get(ctx, cc.ServiceURL("os-aggregates"), &ag, nil); err != nil {
		return NovaCloud{}, notes, c.adminError("listing aggregates (os-aggregates)", err)
	}
	for _, a := range ag.Aggregates {
		n.Aggregates = append(n.Aggregates, records.Aggregate{ID: a.ID, UUID: a.UUID, Name: a.Name, Hosts: a.Hosts, Metadata: a.Metadata})
	}

	gc := at(c.compute, NovaGroupMicroversion)
	var sg struct {
		Groups []struct {
			ID      string   `json:"id"`
			Name    string   `json:"name"`
			Policy  string   `json:"policy"`
			Members []string `json:"members"`
			Rules   struct {
				MaxServerPerHost int `json:"max_server_per_host"`
			} `json:"rules"`
			ProjectID string `json:"project_id"`
			UserID    string `json:"user_id"`
		} `json:"server_groups"`
	}
	if _, err := gc.Get(ctx, gc.ServiceURL("os-server-groups")+"?all_projects=True", &sg, nil); err != nil {
		return NovaCloud{}, notes, c.adminError("listing server groups (os-server-groups)", err)
	}
	for _, g := range sg.Groups {
		n.Groups = append(n.Groups, records.ServerGroup{UUID: g.ID, Name: g.Name, Policy: g.Policy, Members: g.Members,
			MaxServerPerHost: g.Rules.MaxServerPerHost, ProjectID: g.ProjectID, UserID: g.UserID})
	}
	return n, notes, nil
}

// RefreshNova re-reads, for n's hosts, what changes while moves run:
// each host's allocations on its provider — its usage is their sum, so
// whether a consumer is on a host and the usage it adds come from one
// answer — and the nova-compute services (disabled, forced down, up);
// with servers, every server too. The reads run up to parallel at a
// time; the version checks, inventories, traits, aggregates and groups
// are n's (ReadNova reads those). n is not changed: the answer is a new
// cloud sharing n's read-only parts.
func (c *Client) RefreshNova(ctx context.Context, n *NovaCloud, servers bool, parallel int) (NovaCloud, error) {
	pl, err := c.placementClient()
	if err != nil {
		return NovaCloud{}, err
	}
	out := *n
	out.TakenAt = time.Now().UTC()
	out.Hosts = slices.Clone(n.Hosts)
	out.Allocations = map[string]map[string]placement.Resources{}
	perHost := make([]map[string]map[string]placement.Resources, len(out.Hosts))
	errs := make([]error, len(out.Hosts)+2)
	var svcs []novaService
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	run := func(i int, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = f()
		}()
	}
	for i := range out.Hosts {
		run(i, func() error {
			perHost[i] = map[string]map[string]placement.Resources{}
			return c.readProviderAllocations(ctx, pl, out.Hosts[i].ProviderUUID, perHost[i])
		})
	}
	run(len(out.Hosts), func() (err error) {
		svcs, err = c.novaServices(ctx)
		return err
	})
	if servers {
		run(len(out.Hosts)+1, func() (err error) {
			out.Servers, err = c.novaServers(ctx)
			return err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return NovaCloud{}, err
	}
	for i := range out.Hosts {
		h := &out.Hosts[i]
		h.Used = placement.Resources{}
		for consumer, a := range perHost[i] {
			if out.Allocations[consumer] == nil {
				out.Allocations[consumer] = map[string]placement.Resources{}
			}
			out.Allocations[consumer][h.ProviderUUID] = a[h.ProviderUUID]
			for rc, v := range a[h.ProviderUUID] {
				h.Used[rc] += v
			}
		}
		for rc, v := range h.Used {
			if v == 0 {
				delete(h.Used, rc)
			}
		}
		for _, s := range svcs {
			if s.Host == h.Name {
				h.Zone, h.Disabled, h.ForcedDown, h.Up = s.Zone, s.Status == "disabled", s.ForcedDown, s.State == "up"
			}
		}
	}
	return out, nil
}

// novaService is a nova-compute service as os-services lists it.
type novaService struct {
	Host       string `json:"host"`
	Zone       string `json:"zone"`
	Status     string `json:"status"`
	State      string `json:"state"`
	ForcedDown bool   `json:"forced_down"`
}

// novaServices lists the nova-compute services.
func (c *Client) novaServices(ctx context.Context) ([]novaService, error) {
	cc := at(c.compute, NovaReadMicroversion)
	var sv struct {
		Services []novaService `json:"services"`
	}
	if _, err := cc.Get(ctx, cc.ServiceURL("os-services")+"?binary=nova-compute", &sv, nil); err != nil {
		return nil, c.adminError("listing compute services (os-services)", err)
	}
	return sv.Services, nil
}

// adminError describes a failed admin read: a 403 means the user is not
// an admin.
func (c *Client) adminError(what string, err error) error {
	if gophercloud.ResponseCodeIs(err, 403) || gophercloud.ResponseCodeIs(err, 401) {
		return fmt.Errorf("%s on cloud %q: %w: keel needs an admin user (role admin) to read hosts, every project's servers and Placement", what, c.cloud, describe(err))
	}
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", what, c.unreachable(err))
	}
	return fmt.Errorf("%s on cloud %q: %w", what, c.cloud, describe(err))
}

// readProvider fills host's provider: inventories, usages, traits, and
// its consumers' allocations into allocs.
func (c *Client) readProvider(ctx context.Context, pl *gophercloud.ServiceClient, host *NovaHost, allocs map[string]map[string]placement.Resources) error {
	u := host.ProviderUUID
	var inv struct {
		Generation  int64                 `json:"resource_provider_generation"`
		Inventories placement.Inventories `json:"inventories"`
	}
	if _, err := pl.Get(ctx, pl.ServiceURL("resource_providers", u, "inventories"), &inv, nil); err != nil {
		if isNotFound(err) {
			return err
		}
		return fmt.Errorf("reading the inventories of %s (provider %s): %w", host.Name, u, describe(err))
	}
	host.Inventories, host.Generation = inv.Inventories, inv.Generation
	var us struct {
		Usages placement.Resources `json:"usages"`
	}
	if _, err := pl.Get(ctx, pl.ServiceURL("resource_providers", u, "usages"), &us, nil); err != nil {
		return fmt.Errorf("reading the usages of %s (provider %s): %w", host.Name, u, describe(err))
	}
	host.Used = placement.Resources{}
	for rc, v := range us.Usages {
		if v != 0 {
			host.Used[rc] = v
		}
	}
	var tr struct {
		Traits []string `json:"traits"`
	}
	if _, err := pl.Get(ctx, pl.ServiceURL("resource_providers", u, "traits"), &tr, nil); err != nil {
		return fmt.Errorf("reading the traits of %s (provider %s): %w", host.Name, u, describe(err))
	}
	slices.Sort(tr.Traits)
	host.Traits = tr.Traits
	return c.readProviderAllocations(ctx, pl, u, allocs)
}

func (c *Client) readProviderAllocations(ctx context.Context, pl *gophercloud.ServiceClient, rp string, allocs map[string]map[string]placement.Resources) error {
	var al struct {
		Allocations map[string]struct {
			Resources placement.Resources `json:"resources"`
		} `json:"allocations"`
	}
	if _, err := pl.Get(ctx, pl.ServiceURL("resource_providers", rp, "allocations"), &al, nil); err != nil {
		return fmt.Errorf("reading the allocations on provider %s: %w", rp, describe(err))
	}
	for consumer, a := range al.Allocations {
		if allocs[consumer] == nil {
			allocs[consumer] = map[string]placement.Resources{}
		}
		allocs[consumer][rp] = a.Resources
	}
	return nil
}

// ConsumerAllocations reads one consumer's allocations: provider UUID →
// resources (empty when it has none).
func (c *Client) ConsumerAllocations(ctx context.Context, consumer string) (map[string]placement.Resources, error) {
	pl, err := c.placementClient()
	if err != nil {
		return nil, err
	}
	var body struct {
		Allocations map[string]struct {
			Resources placement.Resources `json:"resources"`
		} `json:"allocations"`
	}
	if _, err := pl.Get(ctx, pl.ServiceURL("allocations", consumer), &body, nil); err != nil {
		return nil, fmt.Errorf("reading the allocations of %s: %w", consumer, describe(err))
	}
	out := map[string]placement.Resources{}
	for rp, a := range body.Allocations {
		out[rp] = a.Resources
	}
	return out, nil
}

// rawNovaServer is a server at microversion 2.47 or later (flavor
// embedded), as an admin sees it.
type rawNovaServer struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Host      string `json:"OS-EXT-SRV-ATTR:host"`
	VMState   string `json:"OS-EXT-STS:vm_state"`
	TaskState string `json:"OS-EXT-STS:task_state"`
	Zone      string `json:"OS-EXT-AZ:availability_zone"`
	Flavor    struct {
		Name       string            `json:"original_name"`
		VCPUs      int64             `json:"vcpus"`
		RAM        int64             `json:"ram"`
		Disk       int64             `json:"disk"`
		Ephemeral  int64             `json:"ephemeral"`
		ExtraSpecs map[string]string `json:"extra_specs"`
	} `json:"flavor"`
}

func (r rawNovaServer) server() NovaServer {
	return NovaServer{UUID: r.ID, Name: r.Name, Host: r.Host, Status: r.Status, VMState: r.VMState, TaskState: r.TaskState, Zone: r.Zone,
		Flavor: records.Flavor{Name: r.Flavor.Name, VCPUs: r.Flavor.VCPUs, RAMMB: r.Flavor.RAM, DiskGB: r.Flavor.Disk + r.Flavor.Ephemeral, ExtraSpecs: r.Flavor.ExtraSpecs}}
}

// novaServers lists every server of every project, page by page.
func (c *Client) novaServers(ctx context.Context) ([]NovaServer, error) {
	cc := at(c.compute, NovaReadMicroversion)
	var out []NovaServer
	marker := ""
	for {
		q := url.Values{"all_tenants": {"1"}, "limit": {strconv.Itoa(novaServerPageSize)}}
		if marker != "" {
			q.Set("marker", marker)
		}
		var body struct {
			Servers []rawNovaServer `json:"servers"`
		}
		if _, err := cc.Get(ctx, cc.ServiceURL("servers", "detail")+"?"+q.Encode(), &body, nil); err != nil {
			return nil, c.adminError("listing servers of every project", err)
		}
		for _, r := range body.Servers {
			out = append(out, r.server())
		}
		if len(body.Servers) < novaServerPageSize {
			return out, nil
		}
		marker = body.Servers[len(body.Servers)-1].ID
	}
}

// NovaServerNow reads one server (ErrNotFound when it is gone).
func (c *Client) NovaServerNow(ctx context.Context, id string) (NovaServer, error) {
	cc := at(c.compute, NovaReadMicroversion)
	var body struct {
		Server rawNovaServer `json:"server"`
	}
	if _, err := cc.Get(ctx, cc.ServiceURL("servers", id), &body, nil); err != nil {
		return NovaServer{}, fmt.Errorf("reading server %s: %w", id, describe(err))
	}
	return body.Server.server(), nil
}

// Snapshot is the cloud as keel sim export writes it: the hosts with
// Placement's inventories and usage, the servers on a host, the groups
// and aggregates, with the scheduler's and compute options given (the
// compute API does not expose them: they come from nova.conf).
func (n *NovaCloud) Snapshot(sched scenario.SnapshotScheduler, cp scenario.SnapshotCompute) scenario.Snapshot {
	snap := scenario.Snapshot{TakenAt: n.TakenAt, Scheduler: sched, Compute: cp,
		ServerGroups: n.Groups, Aggregates: n.Aggregates}
	for _, h := range n.Hosts {
		snap.Hosts = append(snap.Hosts, scenario.SnapshotHost{Name: h.Name, Inventories: h.Inventories, Used: h.Used,
			Traits: h.Traits, Zone: h.Zone, Disabled: h.Disabled, ForcedDown: h.ForcedDown})
	}
	group := map[string]string{}
	for _, g := range n.Groups {
		for _, m := range g.Members {
			group[m] = g.UUID
		}
	}
	for _, s := range n.Servers {
		if s.Host == "" {
			continue
		}
		snap.Instances = append(snap.Instances, scenario.SnapshotInstance{UUID: s.UUID, Name: s.Name, Host: s.Host,
			Flavor: s.Flavor, Group: group[s.UUID], VMState: s.VMState})
	}
	return snap
}

// DisableNovaService disables (or enables) a host's nova-compute service
// at microversion 2.53 (by its UUID), with reason.
func (c *Client) DisableNovaService(ctx context.Context, host string, disable bool, reason string) error {
	cc := at(c.compute, NovaReadMicroversion)
	var sv struct {
		Services []struct {
			ID string `json:"id"`
		} `json:"services"`
	}
	q := url.Values{"binary": {"nova-compute"}, "host": {host}}
	if _, err := cc.Get(ctx, cc.ServiceURL("os-services")+"?"+q.Encode(), &sv, nil); err != nil {
		return c.adminError("reading the compute service of "+host, err)
	}
	if len(sv.Services) == 0 {
		return fmt.Errorf("host %s has no nova-compute service", host)
	}
	body := map[string]any{"status": "enabled"}
	if disable {
		body = map[string]any{"status": "disabled", "disabled_reason": reason}
	}
	if _, err := cc.Put(ctx, cc.ServiceURL("os-services", sv.Services[0].ID), body, nil, &gophercloud.RequestOpts{OkCodes: []int{200}}); err != nil {
		return fmt.Errorf("setting the compute service of %s %s: %w", host, body["status"], describe(err))
	}
	return nil
}

// AbortMigration aborts a server's running live migration (2.24+).
func (c *Client) AbortMigration(ctx context.Context, serverID string, migration int64) error {
	if _, err := c.compute.Delete(ctx, c.compute.ServiceURL("servers", serverID, "migrations", strconv.FormatInt(migration, 10)), nil); err != nil {
		return fmt.Errorf("aborting migration %d of server %s: %w", migration, serverID, describe(err))
	}
	return nil
}
