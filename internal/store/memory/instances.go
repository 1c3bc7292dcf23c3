package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// instRec is an instance as the store keeps it: the fields every instance
// has, its flavor shared with every instance of the same plain flavor,
// and the rest — fields most instances leave empty (a resize, hints,
// metadata, keys, a lock, an action in flight) — in rest, nil while every
// one of them is zero. A records.Instance is 744 bytes and the simulator's
// 10,000-host day keeps 180,000 of them; an instRec is 216.
type instRec struct {
	name, projectID, userID, host, zone string
	// flavor is never changed once filed (instFlavor).
	flavor               *records.Flavor
	vmState              records.VMState
	taskState            records.TaskState
	createdAt, updatedAt time.Time
	version              int64
	buildAttempts        int
	// rest holds the other fields (those above zero in it), or is nil.
	rest *records.Instance
}

// flavorKey is a flavor without extra specs or projects, as a map key.
type flavorKey struct {
	id, name, description string
	vcpus, ramMB, diskGB  int64
	private               bool
}

// instFlavor is the flavor an instRec points at: one shared copy per
// distinct plain flavor (most instances', and never changed), or a copy
// of its own for a flavor with extra specs or projects. Called with mu
// held.
func (r *Records) instFlavor(f records.Flavor) *records.Flavor {
	if f.ExtraSpecs != nil || f.Projects != nil {
		c := cloneFlavor(f)
		return &c
	}
	k := flavorKey{id: f.ID, name: f.Name, description: f.Description, vcpus: f.VCPUs, ramMB: f.RAMMB, diskGB: f.DiskGB, private: f.Private}
	if p, ok := r.plainFlavors[k]; ok {
		return p
	}
	p := new(records.Flavor) // not &f, which would put every f on the heap
	*p = f
	r.plainFlavors[k] = p
	return p
}

// packInstance is in as the store keeps it (deep copies of what it
// holds). Called with mu held.
func (r *Records) packInstance(in records.Instance) instRec {
	rec := instRec{
		name: in.Name, projectID: in.ProjectID, userID: in.UserID, host: in.Host, zone: in.Zone,
		flavor: r.instFlavor(in.Flavor), vmState: in.VMState, taskState: in.TaskState,
		createdAt: in.CreatedAt, updatedAt: in.UpdatedAt, version: in.Version, buildAttempts: in.BuildAttempts,
	}
	if !restZero(&in) {
		rest := cloneInstance(in)
		rest.UUID, rest.Name, rest.ProjectID, rest.UserID, rest.Host, rest.Zone = "", "", "", "", "", ""
		rest.Flavor, rest.VMState, rest.TaskState = records.Flavor{}, "", ""
		rest.CreatedAt, rest.UpdatedAt, rest.Version, rest.BuildAttempts = time.Time{}, time.Time{}, 0, 0
		rec.rest = &rest
	}
	return rec
}

// unpackInstance is the instance r keeps under uuid, the caller's to
// change. Called with mu held.
func unpackInstance(uuid string, r *instRec) records.Instance {
	var in records.Instance
	if r.rest != nil {
		in = *r.rest
	}
	in.UUID, in.Name, in.ProjectID, in.UserID, in.Host, in.Zone = uuid, r.name, r.projectID, r.userID, r.host, r.zone
	in.Flavor, in.VMState, in.TaskState = *r.flavor, r.vmState, r.taskState
	in.CreatedAt, in.UpdatedAt, in.Version, in.BuildAttempts = r.createdAt, r.updatedAt, r.version, r.buildAttempts
	return cloneInstance(in)
}

// restZero reports whether every field of in that instRec keeps in rest
// is zero. A field added to records.Instance must be added here or to
// instRec: TestInstanceFieldsRoundTrip fails until it is.
func restZero(in *records.Instance) bool {
	return in.ResizeFlavor == nil && in.ImageRef == "" && in.Hints == nil && in.Metadata == nil &&
		in.Description == "" && in.AccessIPv4 == "" && in.AccessIPv6 == "" && in.DiskConfig == "" && in.Hostname == "" &&
		in.KeyName == "" && in.KeyData == "" && in.ReservationID == "" && in.LaunchIndex == 0 &&
		in.Tags == nil && in.TrustedCerts == nil && in.Fault == "" && in.BuildPhase == "" && in.RequestedZone == "" &&
		in.ForcedHost == "" && in.RequestedHost == "" && in.Owner == "" && lifecycleZero(&in.Lifecycle)
}

func lifecycleZero(l *records.Lifecycle) bool {
	return !l.Locked && l.LockedBy == "" && l.LockedReason == "" && l.Action == "" && l.ActionPhase == "" &&
		l.ActionOps == nil && l.ActionFrom == "" && l.ActionStarted == (time.Time{}) && l.ActionError == "" &&
		l.PowerState == 0 && l.ShelvedAt == (time.Time{}) && l.Snapshot == nil && l.ShelvedImage == "" && l.Rescue == nil
}

// CreateInstance implements store.Store.
func (r *Records) CreateInstance(_ context.Context, in records.Instance) (records.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.instances[in.UUID]; ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrExists)
	}
	in.Version = 1
	r.instances[in.UUID] = r.packInstance(in)
	return in, nil
}

// GetInstance implements store.Store.
func (r *Records) GetInstance(_ context.Context, uuid string) (records.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.instances[uuid]
	if !ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", uuid, store.ErrNotFound)
	}
	return unpackInstance(uuid, &rec), nil
}

// UpdateInstance implements store.Store.
func (r *Records) UpdateInstance(_ context.Context, in records.Instance) (records.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.instances[in.UUID]
	if !ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
	}
	if cur.version != in.Version {
		return records.Instance{}, store.VersionConflict(placement.InstanceVersion, in.UUID, in.Version, cur.version)
	}
	in.Version++
	r.instances[in.UUID] = r.packInstance(in)
	return in, nil
}

// DeleteInstance implements store.Store.
func (r *Records) DeleteInstance(_ context.Context, uuid string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.instances[uuid]; !ok {
		return fmt.Errorf("instance %s: %w", uuid, store.ErrNotFound)
	}
	delete(r.instances, uuid)
	return nil
}

// ListInstances implements store.Store.
func (r *Records) ListInstances(_ context.Context, host string) ([]records.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Sized first: a copy of every instance is large (the simulator's
	// final audit lists 180,000), and growing it by appends would copy it
	// again and again.
	n := len(r.instances)
	if host != "" {
		n = 0
		for _, rec := range r.instances {
			if rec.host == host {
				n++
			}
		}
	}
	if n == 0 {
		return nil, nil
	}
	keys := make([]string, 0, n)
	for k, rec := range r.instances {
		if host == "" || rec.host == host {
			keys = append(keys, k)
		}
	}
	return r.sortedInstances(keys), nil
}

// sortedInstances copies the instances keys names, in UUID order. Called
// with mu held.
func (r *Records) sortedInstances(keys []string) []records.Instance {
	slices.Sort(keys)
	out := make([]records.Instance, len(keys))
	for i, k := range keys {
		rec := r.instances[k]
		out[i] = unpackInstance(k, &rec)
	}
	return out
}

// ListProjectInstances implements store.Instances.
func (r *Records) ListProjectInstances(_ context.Context, project string) ([]records.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for k, rec := range r.instances {
		if rec.projectID == project {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return r.sortedInstances(keys), nil
}

// cloneInstance copies the maps an instance holds, so the store never
// shares them with a caller.
func cloneInstance(in records.Instance) records.Instance {
	in.Flavor = cloneFlavor(in.Flavor)
	if in.Hints != nil {
		h := *in.Hints
		h.SameHost, h.DifferentHost = slices.Clone(h.SameHost), slices.Clone(h.DifferentHost)
		in.Hints = &h
	}
	if in.ResizeFlavor != nil {
		f := cloneFlavor(*in.ResizeFlavor)
		in.ResizeFlavor = &f
	}
	in.Metadata = maps.Clone(in.Metadata)
	in.Tags = slices.Clone(in.Tags)
	in.TrustedCerts = slices.Clone(in.TrustedCerts)
	in.ActionOps = slices.Clone(in.ActionOps)
	if in.Snapshot != nil {
		sn := *in.Snapshot
		in.Snapshot = &sn
	}
	if in.Rescue != nil {
		rs := *in.Rescue
		in.Rescue = &rs
	}
	return in
}

// CreateInstanceAction implements store.Store.
func (r *Records) CreateInstanceAction(_ context.Context, a records.InstanceAction) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.actions[a.InstanceUUID] {
		if b.RequestID == a.RequestID {
			return fmt.Errorf("instance action %s of %s: %w", a.RequestID, a.InstanceUUID, store.ErrExists)
		}
	}
	r.actions[a.InstanceUUID] = append(r.actions[a.InstanceUUID], a)
	return nil
}

// ListInstanceActions implements store.Store.
func (r *Records) ListInstanceActions(_ context.Context, instanceUUID string) ([]records.InstanceAction, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.actions[instanceUUID]), nil
}
