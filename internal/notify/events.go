package notify

import (
	"time"

	"keel/internal/migration"
	"keel/internal/records"
)

// Priorities (oslo.messaging's, upper case in the message; the topic's
// suffix is the lower-case form).
const (
	PriorityInfo  = "INFO"
	PriorityError = "ERROR"
)

// Event is one notification: Nova's event_type, priority, publisher_id
// and payload. Key orders events: those of one key (an instance's UUID, a
// service's host) are sent in the order they were emitted.
type Event struct {
	EventType string
	Priority  string
	Publisher string
	Payload   Object
	Key       string
	Time      time.Time
}

// Source is what a diff needs besides the records: the time, who asked
// (from the request's context, when there was one) and this server's host
// name, the publisher of what nova-api would send.
type Source struct {
	Now     time.Time
	Who     Initiator
	APIHost string
}

func (s Source) api() string { return "nova-api:" + s.APIHost }

func compute(host string) string { return "nova-compute:" + host }

// actionNames are Nova's notification actions of keel's lifecycle
// actions, and the payload class each one's events carry.
var actionNames = map[string]struct{ name, payload string }{
	"stop":          {"power_off", InstanceActionPayload},
	"start":         {"power_on", InstanceActionPayload},
	"reboot":        {"reboot", InstanceActionPayload},
	"pause":         {"pause", InstanceActionPayload},
	"unpause":       {"unpause", InstanceActionPayload},
	"suspend":       {"suspend", InstanceActionPayload},
	"resume":        {"resume", InstanceActionPayload},
	"rescue":        {"rescue", InstanceActionRescuePayload},
	"unrescue":      {"unrescue", InstanceActionPayload},
	"rebuild":       {"rebuild", InstanceActionRebuildPayload},
	"shelve":        {"shelve", InstanceActionPayload},
	"shelveOffload": {"shelve_offload", InstanceActionPayload},
	"unshelve":      {"unshelve", InstanceActionPayload},
	// Nova sends instance.snapshot.* for a backup as for a snapshot.
	"createImage":  {"snapshot", InstanceActionSnapshotPayload},
	"createBackup": {"snapshot", InstanceActionSnapshotPayload},
}

// errorEvents are the actions Nova sends an instance.<action>.error for;
// the others' failures are a compute.exception.
var errorEvents = map[string]bool{"create": true, "reboot": true, "rebuild": true, "resize": true}

type builder struct {
	src Source
	out []Event
}

func (b *builder) add(eventType, priority, publisher string, payload Object, key string) {
	b.out = append(b.out, Event{EventType: eventType, Priority: priority, Publisher: publisher, Payload: payload, Key: key, Time: b.src.Now})
}

// action adds instance.<name>.<phase> with class's payload of in.
func (b *builder) action(name, phase, class, publisher string, in records.Instance) {
	b.add("instance."+name+"."+phase, PriorityInfo, publisher, actionPayload(class, in, b.src.Who, nil), in.UUID)
}

// failed adds what Nova sends when name failed: instance.<name>.error
// with the fault in the payload, or compute.exception.
func (b *builder) failed(name, class, publisher string, in records.Instance, f Fault) {
	if errorEvents[name] {
		b.add("instance."+name+".error", PriorityError, publisher, actionPayload(class, in, b.src.Who, &f), in.UUID)
		return
	}
	b.add("compute.exception", PriorityError, publisher, exceptionPayload(f), in.UUID)
}

func (b *builder) publisher(in records.Instance) string {
	if in.Host != "" {
		return compute(in.Host)
	}
	return b.src.api()
}

// InstanceChange is what a committed change of an instance record means:
// old is nil for a new record, in nil for a deleted one.
func InstanceChange(src Source, old, in *records.Instance) []Event {
	b := &builder{src: src}
	switch {
	case old == nil && in == nil:
		return nil
	case in == nil:
		gone := *old
		gone.VMState, gone.TaskState, gone.UpdatedAt = records.VMDeleted, records.TaskNone, src.Now
		b.action("delete", "end", InstanceActionPayload, b.publisher(*old), gone)
		return b.out
	case old == nil:
		// A new record is building, with nothing to say yet: its boot
		// starts when a host is chosen.
		return nil
	}
	o, n := *old, *in
	if o.VMState != n.VMState || o.TaskState != n.TaskState || o.Host != n.Host || o.Name != n.Name || o.Flavor.ID != n.Flavor.ID {
		b.add("instance.update", PriorityInfo, b.publisher(n), updatePayload(o, n, src.Who, src.Now), n.UUID)
	}
	if o.Locked != n.Locked {
		ev := "instance.unlock"
		if n.Locked {
			ev = "instance.lock"
		}
		b.add(ev, PriorityInfo, src.api(), actionPayload(InstanceActionPayload, n, src.Who, nil), n.UUID)
	}
	if n.TaskState == records.TaskDeleting && o.TaskState != records.TaskDeleting {
		b.action("delete", "start", InstanceActionPayload, b.publisher(n), n)
	}
	b.build(o, n)
	b.lifecycle(o, n)
	return b.out
}

// build: a boot (not an unshelve's) starts when its host is chosen and
// ends ACTIVE (or stopped) or in ERROR.
func (b *builder) build(o, n records.Instance) {
	if o.VMState != records.VMBuilding || n.Action != "" {
		return
	}
	if n.Host != "" && n.Host != o.Host && n.VMState == records.VMBuilding {
		b.action("create", "start", InstanceCreatePayload, compute(n.Host), n)
	}
	switch n.VMState {
	case records.VMBuilding:
	case records.VMError:
		b.failed("create", InstanceCreatePayload, b.publisher(n), n, Fault{Exception: "BuildAbortException", Message: n.Fault, Function: "build_and_run_instance"})
	default:
		b.action("create", "end", InstanceCreatePayload, compute(n.Host), n)
	}
}

// lifecycle: an action in flight begins when Action is set and ends (or
// fails, with ActionError) when it is cleared or another follows it.
func (b *builder) lifecycle(o, n records.Instance) {
	if o.Action == n.Action {
		return
	}
	if a, ok := actionNames[o.Action]; ok {
		if n.ActionError != "" {
			b.failed(a.name, a.payload, b.publisher(n), n, Fault{Exception: "InstanceActionFailed", Message: n.ActionError, Function: a.name})
		} else {
			// The snapshot's image, which the action's end clears.
			end := n
			end.Snapshot = o.Snapshot
			b.action(a.name, "end", a.payload, b.publisher(n), end)
		}
	}
	if a, ok := actionNames[n.Action]; ok {
		b.action(a.name, "start", a.payload, b.publisher(n), n)
	}
}

// ServiceChange is what a committed change of a service record means (old
// nil for a new one): service.create, or service.update when its
// disabled, disabled_reason or forced_down changed (as Nova, never for a
// heartbeat). keel server replicas' records are not compute services and
// say nothing.
func ServiceChange(src Source, old *records.Service, s records.Service) []Event {
	if !s.IsCompute() {
		return nil
	}
	b := &builder{src: src}
	switch {
	case old == nil:
		b.add("service.create", PriorityInfo, compute(s.Host), servicePayload(s), "service:"+s.Host)
	case old.Disabled != s.Disabled || old.DisabledReason != s.DisabledReason || old.ForcedDown != s.ForcedDown:
		b.add("service.update", PriorityInfo, compute(s.Host), servicePayload(s), "service:"+s.Host)
	}
	return b.out
}

// ServiceDeleted is what the delete of a compute service means: Nova's
// service.delete, its publisher the deleted service (as Service.destroy
// sends it), the payload the record as it was.
func ServiceDeleted(src Source, s records.Service) []Event {
	if !s.IsCompute() {
		return nil
	}
	b := &builder{src: src}
	b.add("service.delete", PriorityInfo, compute(s.Host), servicePayload(s), "service:"+s.Host)
	return b.out
}

// MigrationChange is what a committed change of a migration record means
// (old nil for a new one), with in the instance as it is now: the steps of
// a live migration (live_migration_pre, _post, _post_dest, _rollback,
// _rollback_dest, _abort, _force_complete), of a cold migration or resize
// (resize_prep, resize, resize_finish, resize_confirm, resize_revert, and
// resize.error) and an evacuation's instance.evacuate.
func MigrationChange(src Source, old *records.Migration, m records.Migration, in records.Instance) []Event {
	if old == nil {
		old = &records.Migration{}
	}
	b := &builder{src: src}
	switch m.Type {
	case records.MigrationTypeLive:
		b.live(*old, m, in)
	case records.MigrationTypeCold, records.MigrationTypeResize:
		b.cold(*old, m, in)
	case records.MigrationTypeEvac:
		if (m.Status == records.MigrationDone || m.Status == records.MigrationCompleted) &&
			old.Status != records.MigrationDone && old.Status != records.MigrationCompleted {
			b.add("instance.evacuate", PriorityInfo, compute(m.DestHost), actionPayload(InstanceActionPayload, in, src.Who, nil), in.UUID)
		}
	}
	return b.out
}

// livePhases are the live migration's forward phases in order, with the
// events entering each one sends.
var livePhases = []struct {
	phase  records.MigrationPhase
	events []liveEvent
}{
	{migration.PhasePrepare, []liveEvent{{"live_migration_pre", "start", dest}}},
	{migration.PhaseCopy, []liveEvent{{"live_migration_pre", "end", dest}}},
	{migration.PhasePostSource, []liveEvent{{"live_migration_post", "start", source}}},
	{migration.PhasePostDest, []liveEvent{{"live_migration_post_dest", "start", dest}}},
	{migration.PhaseFinish, []liveEvent{{"live_migration_post_dest", "end", dest}, {"live_migration_post", "end", source}}},
}

type side bool

const (
	source side = false
	dest   side = true
)

type liveEvent struct {
	name, phase string
	side        side
}

func (b *builder) at(s side, m records.Migration) string {
	if s == dest {
		return compute(m.DestHost)
	}
	return compute(m.SourceHost)
}

func phaseIndex(p records.MigrationPhase) int {
	for i, lp := range livePhases {
		if lp.phase == p {
			return i
		}
	}
	return -1
}

func (b *builder) live(o, m records.Migration, in records.Instance) {
	// The forward steps: each phase entered (and any skipped on the way,
	// as a resume can) sends its events once.
	from, to := phaseIndex(o.Phase), phaseIndex(m.Phase)
	for i := from + 1; i <= to; i++ {
		for _, e := range livePhases[i].events {
			b.action(e.name, e.phase, InstanceActionPayload, b.at(e.side, m), in)
		}
	}
	if m.AbortRequested && !o.AbortRequested || m.Outcome == records.MigrationCancelled && o.Outcome != records.MigrationCancelled && !o.AbortRequested {
		b.action("live_migration_abort", "start", InstanceActionPayload, b.at(source, m), in)
	}
	if m.ForceComplete && !o.ForceComplete {
		b.action("live_migration_force_complete", "start", InstanceActionPayload, b.at(source, m), in)
	}
	if o.ForceComplete && o.Phase == migration.PhaseCopy && m.Phase != migration.PhaseCopy {
		b.action("live_migration_force_complete", "end", InstanceActionPayload, b.at(source, m), in)
	}
	// The rollback: the destination cleaned up, then the source.
	if m.Phase == migration.PhaseRollbackDest && o.Phase != migration.PhaseRollbackDest {
		b.action("live_migration_rollback", "start", InstanceActionPayload, b.at(source, m), in)
		b.action("live_migration_rollback_dest", "start", InstanceActionPayload, b.at(dest, m), in)
	}
	if o.Phase == migration.PhaseRollbackDest && m.Phase != migration.PhaseRollbackDest {
		b.action("live_migration_rollback_dest", "end", InstanceActionPayload, b.at(dest, m), in)
	}
	if m.Phase == migration.PhaseRevert && o.Phase != migration.PhaseRevert && o.Phase != migration.PhaseRollbackDest {
		b.action("live_migration_rollback", "start", InstanceActionPayload, b.at(source, m), in)
	}
	if records.MigrationTerminal(m.Status) && !records.MigrationTerminal(o.Status) {
		switch m.Status {
		case records.MigrationCompleted:
		case records.MigrationCancelled:
			b.action("live_migration_rollback", "end", InstanceActionPayload, b.at(source, m), in)
			b.action("live_migration_abort", "end", InstanceActionPayload, b.at(source, m), in)
		default:
			if o.Phase == migration.PhaseRevert || o.Phase == migration.PhaseRollbackDest {
				b.action("live_migration_rollback", "end", InstanceActionPayload, b.at(source, m), in)
			}
			b.failed("live_migration", InstanceActionPayload, b.at(source, m), in, Fault{Exception: "MigrationError", Message: m.Error, Function: "live_migration"})
		}
	}
}

// coldSteps are a cold migration's or resize's statuses in order, with
// the events entering each one sends.
var coldSteps = []struct {
	status records.MigrationStatus
	events []liveEvent
}{
	{records.MigrationPreMigrating, []liveEvent{{"resize_prep", "start", dest}}},
	{records.MigrationMigrating, []liveEvent{{"resize_prep", "end", dest}, {"resize", "start", source}}},
	{records.MigrationPostMigrating, []liveEvent{{"resize", "end", source}, {"resize_finish", "start", dest}}},
	{records.MigrationFinished, []liveEvent{{"resize_finish", "end", dest}}},
}

func coldIndex(s records.MigrationStatus) int {
	for i, c := range coldSteps {
		if c.status == s {
			return i
		}
	}
	return -1
}

func (b *builder) cold(o, m records.Migration, in records.Instance) {
	from, to := coldIndex(o.Status), coldIndex(m.Status)
	if to < 0 && (m.Status == records.MigrationConfirming || m.Status == records.MigrationConfirmed ||
		m.Status == records.MigrationReverting || m.Status == records.MigrationReverted) {
		to = len(coldSteps) - 1 // past finished
	}
	if from < 0 && o.Status != "" && o.Status != records.MigrationAccepted {
		from = len(coldSteps) - 1
	}
	for i := from + 1; i <= to; i++ {
		for _, e := range coldSteps[i].events {
			class := InstanceActionPayload
			if e.name == "resize_prep" {
				class = InstanceActionResizePrepPayload
			}
			b.action(e.name, e.phase, class, b.at(e.side, m), in)
		}
	}
	if o.Status == m.Status {
		return
	}
	switch m.Status {
	case records.MigrationConfirming:
		b.action("resize_confirm", "start", InstanceActionPayload, b.at(source, m), in)
	case records.MigrationConfirmed:
		if o.Status != records.MigrationConfirming {
			b.action("resize_confirm", "start", InstanceActionPayload, b.at(source, m), in)
		}
		b.action("resize_confirm", "end", InstanceActionPayload, b.at(source, m), in)
	case records.MigrationReverting:
		b.action("resize_revert", "start", InstanceActionPayload, b.at(dest, m), in)
	case records.MigrationReverted:
		if o.Status != records.MigrationReverting {
			b.action("resize_revert", "start", InstanceActionPayload, b.at(dest, m), in)
		}
		b.action("resize_revert", "end", InstanceActionPayload, b.at(source, m), in)
	case records.MigrationError, records.MigrationFailed:
		b.failed("resize", InstanceActionPayload, b.at(source, m), in, Fault{Exception: "ResizeError", Message: m.Error, Function: "resize_instance"})
	}
}
