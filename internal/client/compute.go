package client

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/hypervisors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/natural"
)

// Host is one hypervisor as os-hypervisors/detail reports it, with its
// capacity as Placement computes it.
type Host struct {
	Name         string `json:"host"`
	State        string `json:"state"`  // up or down
	Status       string `json:"status"` // enabled or disabled
	VCPUs        int    `json:"vcpus"`
	VCPUsUsed    int    `json:"vcpus_used"`
	MemoryMB     int    `json:"memory_mb"`
	MemoryMBUsed int    `json:"memory_mb_used"`
	LocalGB      int    `json:"local_gb"`
	LocalGBUsed  int    `json:"local_gb_used"`
	RunningVMs   int    `json:"running_vms"`
	// Placement is the host's resources as Placement counts them, by
	// class (VCPU, MEMORY_MB, DISK_GB, …), over its provider tree: the
	// numbers the web view and the scheduler use. Capacity is
	// (total − reserved) × allocation_ratio, so a VCPU inventory of 32
	// with cpu_allocation_ratio 4 holds 128. Nil when the server does not
	// serve keel's state endpoint (the raw fields above are then all
	// there is).
	Placement map[string]HostResource `json:"placement,omitempty"`
	// Measured is what the host's guests really use, as its agent last
	// measured it, beside the claims of Placement; nil when the host
	// reports no measurement (unavailable, never 0) or the server does not
	// serve keel's state endpoint.
	Measured *HostMeasured `json:"measured,omitempty"`
}

// HostMeasured is a host's last measured CPU (keel's state endpoint).
type HostMeasured struct {
	// CPUPercent is the fraction of the host's CPUs busy (Nova's
	// cpu.percent: 0.37 is 37 %).
	CPUPercent float64 `json:"cpu_percent"`
	// MeasuredAt is when it was measured, AgeSeconds how long before the
	// server answered.
	MeasuredAt time.Time `json:"measured_at"`
	AgeSeconds float64   `json:"age_seconds"`
}

// HostResource is one resource class of a host as Placement counts it.
type HostResource struct {
	Total           int64   `json:"total"`
	Reserved        int64   `json:"reserved"`
	AllocationRatio float64 `json:"allocation_ratio"`
	Capacity        int64   `json:"capacity"`
	Used            int64   `json:"used"`
}

// Hosts lists every hypervisor, sorted by name (admin only), each with
// its Placement resources (GET /keel/v1/ui/state, the web view's own
// figures).
func (c *Client) Hosts(ctx context.Context) ([]Host, error) {
	pages, err := hypervisors.List(c.compute, nil).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing hypervisors: %w", describe(err))
	}
	hs, err := hypervisors.ExtractHypervisors(pages)
	if err != nil {
		return nil, fmt.Errorf("reading the hypervisor list: %w", err)
	}
	res, measured, err := c.hostResources(ctx)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	out := make([]Host, 0, len(hs))
	for _, h := range hs {
		out = append(out, Host{
			Name: h.HypervisorHostname, State: h.State, Status: h.Status,
			VCPUs: h.VCPUs, VCPUsUsed: h.VCPUsUsed, MemoryMB: h.MemoryMB, MemoryMBUsed: h.MemoryMBUsed,
			LocalGB: h.LocalGB, LocalGBUsed: h.LocalGBUsed, RunningVMs: h.RunningVMs,
			Placement: res[h.HypervisorHostname], Measured: measured[h.HypervisorHostname],
		})
	}
	sort.Slice(out, func(i, j int) bool { return natural.Less(out[i].Name, out[j].Name) })
	return out, nil
}

// hostResources reads every host's Placement resources and last
// measured CPU from keel's state endpoint, by host name.
func (c *Client) hostResources(ctx context.Context) (map[string]map[string]HostResource, map[string]*HostMeasured, error) {
	var body struct {
		Hosts []struct {
			Name      string                  `json:"name"`
			Resources map[string]HostResource `json:"resources"`
			Measured  *HostMeasured           `json:"measured"`
		} `json:"hosts"`
	}
	if _, err := c.keel.Get(ctx, c.keel.ServiceURL("ui", "state"), &body, nil); err != nil {
		return nil, nil, fmt.Errorf("reading the hosts' capacities: %w", describe(err))
	}
	out := make(map[string]map[string]HostResource, len(body.Hosts))
	measured := make(map[string]*HostMeasured, len(body.Hosts))
	for _, h := range body.Hosts {
		out[h.Name] = h.Resources
		if h.Measured != nil {
			measured[h.Name] = h.Measured
		}
	}
	return out, measured, nil
}

// Flavor is a flavor's size.
type Flavor struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	VCPUs  int    `json:"vcpus"`
	RAMMB  int    `json:"ram"`
	DiskGB int    `json:"disk"`
}

func flavorOf(f flavors.Flavor) Flavor {
	return Flavor{ID: f.ID, Name: f.Name, VCPUs: f.VCPUs, RAMMB: f.RAM, DiskGB: f.Disk}
}

// Flavors lists every flavor.
func (c *Client) Flavors(ctx context.Context) ([]Flavor, error) {
	pages, err := flavors.ListDetail(c.compute, nil).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing flavors: %w", describe(err))
	}
	fs, err := flavors.ExtractFlavors(pages)
	if err != nil {
		return nil, fmt.Errorf("reading the flavor list: %w", err)
	}
	out := make([]Flavor, 0, len(fs))
	for _, f := range fs {
		out = append(out, flavorOf(f))
	}
	return out, nil
}

// FindFlavor finds a flavor by id, else by name.
func (c *Client) FindFlavor(ctx context.Context, ref string) (Flavor, error) {
	f, err := flavors.Get(ctx, c.compute, ref).Extract()
	if err == nil {
		return flavorOf(*f), nil
	}
	if !isNotFound(err) {
		return Flavor{}, fmt.Errorf("flavor %s: %w", ref, describe(err))
	}
	all, err := c.Flavors(ctx)
	if err != nil {
		return Flavor{}, err
	}
	var names []string
	for _, f := range all {
		if f.Name == ref {
			return f, nil
		}
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return Flavor{}, fmt.Errorf("flavor %q: %w (flavors: %s)", ref, ErrNotFound, orNone(names))
}

// Server is an instance as the compute API shows it to an admin.
type Server struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Status     string    `json:"status"`
	VMState    string    `json:"vm_state"`
	TaskState  string    `json:"task_state,omitempty"`
	PowerState string    `json:"power_state"`
	Host       string    `json:"host,omitempty"`
	FlavorID   string    `json:"flavor_id"`
	FlavorName string    `json:"flavor_name,omitempty"`
	Zone       string    `json:"availability_zone,omitempty"`
	ProjectID  string    `json:"project_id"`
	UserID     string    `json:"user_id"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
	Fault      string    `json:"fault,omitempty"`
}

func serverOf(s servers.Server) Server {
	out := Server{
		ID: s.ID, Name: s.Name, Status: s.Status, VMState: s.VmState, TaskState: s.TaskState,
		PowerState: s.PowerState.String(), Host: s.Host, Zone: s.AvailabilityZone,
		ProjectID: s.TenantID, UserID: s.UserID, Created: s.Created, Updated: s.Updated, Fault: s.Fault.Message,
	}
	// Before 2.47 the flavor is a reference ({"id", "links"}); from 2.47 a
	// copy of the flavor with its original_name.
	if id, ok := s.Flavor["id"].(string); ok {
		out.FlavorID = id
	}
	if name, ok := s.Flavor["original_name"].(string); ok {
		out.FlavorName = name
	}
	return out
}

// CreateServer boots an instance of a flavor (id or name) with no
// networks, and returns it as first shown (status BUILD).
func (c *Client) CreateServer(ctx context.Context, name, flavorRef string) (Server, error) {
	f, err := c.FindFlavor(ctx, flavorRef)
	if err != nil {
		return Server{}, err
	}
	created, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name, FlavorRef: f.ID, Networks: "none"}, nil).Extract()
	if err != nil {
		return Server{}, fmt.Errorf("creating server %s: %w", name, describe(err))
	}
	s, err := c.GetServer(ctx, created.ID)
	if err != nil {
		return Server{}, err
	}
	s.FlavorName = f.Name
	return s, nil
}

// GetServer shows a server by id.
func (c *Client) GetServer(ctx context.Context, id string) (Server, error) {
	s, err := servers.Get(ctx, c.compute, id).Extract()
	if err != nil {
		return Server{}, fmt.Errorf("server %s: %w", id, describe(err))
	}
	return serverOf(*s), nil
}

// Servers lists servers (every project's when allProjects and the caller
// is an admin), sorted by name (naturally: vm2 before vm10) then id, with
// their flavors' names.
func (c *Client) Servers(ctx context.Context, allProjects bool) ([]Server, error) {
	pages, err := servers.List(c.compute, servers.ListOpts{AllTenants: allProjects}).AllPages(ctx)
	if allProjects && gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		// Not an admin: the caller's own project is all it may list.
		pages, err = servers.List(c.compute, servers.ListOpts{}).AllPages(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("listing servers: %w", describe(err))
	}
	ss, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, fmt.Errorf("reading the server list: %w", err)
	}
	out := make([]Server, 0, len(ss))
	for _, s := range ss {
		out = append(out, serverOf(s))
	}
	c.nameFlavors(ctx, out)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return natural.Less(out[i].Name, out[j].Name)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// nameFlavors fills in flavor names (best effort: a listing without them
// is still useful).
func (c *Client) nameFlavors(ctx context.Context, ss []Server) {
	need := false
	for _, s := range ss {
		need = need || (s.FlavorName == "" && s.FlavorID != "")
	}
	if !need {
		return
	}
	fs, err := c.Flavors(ctx)
	if err != nil {
		return
	}
	names := map[string]string{}
	for _, f := range fs {
		names[f.ID] = f.Name
	}
	for i := range ss {
		if ss[i].FlavorName == "" {
			ss[i].FlavorName = names[ss[i].FlavorID]
		}
	}
}

// FindServer finds a server by id, else by exact name (among every
// project's for an admin). Several servers with the name are an error that
// lists their ids.
func (c *Client) FindServer(ctx context.Context, ref string) (Server, error) {
	s, err := c.GetServer(ctx, ref)
	if err == nil {
		one := []Server{s}
		c.nameFlavors(ctx, one)
		return one[0], nil
	}
	if !isNotFound(err) {
		return Server{}, err
	}
	all, lerr := c.Servers(ctx, true)
	if lerr != nil {
		return Server{}, lerr
	}
	var found []Server
	for _, s := range all {
		if s.Name == ref {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return Server{}, fmt.Errorf("no server with id or name %q: %w", ref, ErrNotFound)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, s := range found {
		ids[i] = s.ID
	}
	return Server{}, fmt.Errorf("%d servers are named %q; give an id: %s", len(found), ref, strings.Join(ids, ", "))
}

// DeleteServer deletes a server by id.
func (c *Client) DeleteServer(ctx context.Context, id string) error {
	if err := servers.Delete(ctx, c.compute, id).ExtractErr(); err != nil {
		return fmt.Errorf("deleting server %s: %w", id, describe(err))
	}
	return nil
}

// ResetState is os-resetState (admin): the server's vm_state becomes
// state ("active" or "error") and its task is cleared; keel also puts its
// allocations right.
func (c *Client) ResetState(ctx context.Context, id, state string) error {
	if err := servers.ResetState(ctx, c.compute, id, servers.ServerState(state)).ExtractErr(); err != nil {
		return fmt.Errorf("resetting the state of server %s to %s: %w", id, state, describe(err))
	}
	return nil
}

// WaitServer polls a server every interval until done reports true for
// it, and returns it. A server that disappears (404) is passed to done as
// a Server with Status "DELETED" and only its ID.
func (c *Client) WaitServer(ctx context.Context, id string, interval time.Duration, done func(Server) bool) (Server, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s, err := c.GetServer(ctx, id)
		if isNotFound(err) {
			s, err = Server{ID: id, Status: "DELETED"}, nil
		}
		if err != nil {
			return s, err
		}
		if done(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-t.C:
		}
	}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Evacuate is the evacuate action (admin): the server of a host that is
// down is rebuilt on host, or where the scheduler puts it when host is
// empty.
//
// The body is written here: gophercloud's EvacuateOpts always sends
// onSharedStorage, which the API refuses from microversion 2.14.
func (c *Client) Evacuate(ctx context.Context, id, host string) error {
	args := map[string]any{}
	if host != "" {
		args["host"] = host
	}
	_, err := c.compute.Post(ctx, c.compute.ServiceURL("servers", id, "action"), map[string]any{"evacuate": args}, nil,
		&gophercloud.RequestOpts{OkCodes: []int{200}})
	if err != nil {
		return fmt.Errorf("evacuating server %s: %w", id, describe(err))
	}
	return nil
}
