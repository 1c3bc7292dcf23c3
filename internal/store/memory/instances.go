package memory

import (
	"time"

	"keel/internal/records"
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
func (s *Store) instFlavor(f records.Flavor) *records.Flavor {
	if f.ExtraSpecs != nil || f.Projects != nil {
		c := cloneFlavor(f)
		return &c
	}
	k := flavorKey{id: f.ID, name: f.Name, description: f.Description, vcpus: f.VCPUs, ramMB: f.RAMMB, diskGB: f.DiskGB, private: f.Private}
	if p, ok := s.plainFlavors[k]; ok {
		return p
	}
	p := new(records.Flavor) // not &f, which would put every f on the heap
	*p = f
	s.plainFlavors[k] = p
	return p
}

// packInstance is in as the store keeps it (deep copies of what it
// holds). Called with mu held.
func (s *Store) packInstance(in records.Instance) instRec {
	r := instRec{
		name: in.Name, projectID: in.ProjectID, userID: in.UserID, host: in.Host, zone: in.Zone,
		flavor: s.instFlavor(in.Flavor), vmState: in.VMState, taskState: in.TaskState,
		createdAt: in.CreatedAt, updatedAt: in.UpdatedAt, version: in.Version, buildAttempts: in.BuildAttempts,
	}
	if !restZero(&in) {
		rest := cloneInstance(in)
		rest.UUID, rest.Name, rest.ProjectID, rest.UserID, rest.Host, rest.Zone = "", "", "", "", "", ""
		rest.Flavor, rest.VMState, rest.TaskState = records.Flavor{}, "", ""
		rest.CreatedAt, rest.UpdatedAt, rest.Version, rest.BuildAttempts = time.Time{}, time.Time{}, 0, 0
		r.rest = &rest
	}
	return r
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
		in.Description == "" && in.AccessIPv4 == "" && in.AccessIPv6 == "" && in.DiskConfig == "" &&
		in.KeyName == "" && in.KeyData == "" && in.ReservationID == "" && in.LaunchIndex == 0 &&
		in.Tags == nil && in.Fault == "" && in.BuildPhase == "" && in.RequestedZone == "" &&
		in.ForcedHost == "" && in.Owner == "" && lifecycleZero(&in.Lifecycle)
}

func lifecycleZero(l *records.Lifecycle) bool {
	return !l.Locked && l.LockedBy == "" && l.LockedReason == "" && l.Action == "" && l.ActionPhase == "" &&
		l.ActionOps == nil && l.ActionFrom == "" && l.ActionStarted == (time.Time{}) && l.ActionError == "" &&
		l.PowerState == 0 && l.ShelvedAt == (time.Time{}) && l.Snapshot == nil && l.ShelvedImage == ""
}
