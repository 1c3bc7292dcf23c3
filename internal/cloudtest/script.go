package cloudtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"keel/internal/conductor"
	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// RunScripts runs every script in dir/*.txt, each as a subtest on a cloud
// of its own. A script is a list of commands, each followed by the output
// it must print (below a "----" line); `go test -run 'TestScripts/NAME'
// -rewrite` writes what the commands print now into the file, for a
// change made on purpose (then read the diff).
//
// A command that changes the cloud prints what changed by the time it
// returned (the steps it queued at that instant run first): each
// instance whose state moved, each migration that was created or moved
// on. The commands (NAME is an instance's name; D a duration such as 8s):
//
//	cloud [hosts=N] [legacy] [max-concurrent=N] [cpu-ratio=F] [sweeps]
//	      [build-timeout=D] [copy-stall=D] [stall-after=D] [confirm-window=D]
//	                                   a new cloud (the first command; sweeps
//	                                   runs the conductor's periodic sweeps)
//	seed NAME host=H flavor=F          an ACTIVE instance put there directly
//	boot NAME flavor=F [on=H]          a boot (on: the admin's forced host)
//	live-migrate NAME [to=H]           os-migrateLive
//	migrate NAME [to=H]                a cold migration
//	resize NAME flavor=F
//	confirm NAME | revert NAME         the open resize
//	evacuate NAME [to=H]
//	abort NAME                         the instance's running live migration
//	delete NAME
//	act NAME ACTION                    a server action (stop, start, pause,
//	                                   unpause, suspend, resume, reboot, …),
//	                                   waited for
//	fail STEP host=H [instance=NAME] [msg=(TEXT)]
//	                                   the next STEP (spawn, pre_live_migration,
//	                                   live_migration, …) on H fails
//	force-down H | force-up H          the host's service forced down (or up)
//	cut H | mend H                     the conductor's calls to H's agent find
//	                                   no agent (bus.ErrUnavailable), or do
//	                                   again; the agent runs on and reports
//	advance D                          the virtual clock moves on
//	restart                            the server restarts: a new conductor
//	                                   over the same store and agents recovers
//	audit                              the invariants (Violations), or ok
//	show instances|migrations|usage|allocations|guests
//	                                   the state, whole (allocations: each
//	                                   instance's, and its migration's;
//	                                   guests: the hypervisors')
//
// Flavors are small, medium, large and huge (Flavors).
func RunScripts(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := &script{t: t, names: map[string]string{}}
			datadriven.RunTest(t, f, s.run)
		})
	}
}

type script struct {
	t      *testing.T
	c      *Cloud
	names  map[string]string // instance name → UUID
	before snapshot
	stop   context.CancelFunc // the sweeps of the current conductor
}

// snapshot is what a command's output compares: instances and
// migrations, described.
type snapshot struct {
	instances  map[string]string // name → description
	migrations map[int64]migrationLine
}

// migrationLine is a migration described: what it moves (head) and its
// status (with its error).
type migrationLine struct{ head, status string }

func (m migrationLine) String() string { return m.head + " " + m.status }

func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "cloud" && s.c == nil {
		d.Fatalf(t, "the first command must be cloud")
	}
	var out string
	var err error
	switch d.Cmd {
	case "cloud":
		return s.newCloud(t, d)
	case "seed":
		in := s.c.Seed(s.str(t, d, "host"), s.name(t, d), s.flavor(t, d))
		s.names[in.Name] = in.UUID
	case "boot":
		err = s.boot(t, d)
	case "live-migrate", "migrate", "evacuate":
		err = s.move(t, d)
	case "resize":
		_, err = s.c.Cond.Resize(context.Background(), s.uuid(t, d), s.flavor(t, d))
	case "confirm":
		err = s.c.Cond.ConfirmResize(context.Background(), s.uuid(t, d))
	case "revert":
		err = s.c.Cond.RevertResize(context.Background(), s.uuid(t, d))
	case "abort":
		err = s.abort(t, d)
	case "delete":
		err = s.c.Cond.Delete(context.Background(), s.uuid(t, d))
	case "act":
		err = s.act(t, d)
	case "fail":
		s.fail(t, d)
	case "cut", "mend":
		s.c.Cut(d.CmdArgs[0].Key, d.Cmd == "cut")
	case "force-down", "force-up":
		err = s.forceDown(d.CmdArgs[0].Key, d.Cmd == "force-down")
	case "advance":
		var dur time.Duration
		if dur, err = time.ParseDuration(d.CmdArgs[0].Key); err == nil {
			s.c.Advance(dur)
		}
	case "restart":
		s.restart(t)
	case "audit":
		if v := s.c.Violations(); len(v) > 0 {
			return strings.Join(v, "\n") + "\n"
		}
		return "ok\n"
	case "show":
		return s.show(t, d)
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if err != nil {
		out = "error: " + err.Error() + "\n"
	}
	s.c.Settle()
	return out + s.changes()
}

func (s *script) newCloud(t *testing.T, d *datadriven.TestData) string {
	o := Options{}
	var sweeps bool
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "hosts":
			a.Scan(t, 0, &o.Hosts)
		case "legacy":
			o.Legacy = true
		case "max-concurrent":
			a.Scan(t, 0, &o.Conductor.MaxConcurrentLiveMigrations)
		case "cpu-ratio":
			a.Scan(t, 0, &o.CPURatio)
		case "sweeps":
			sweeps = true
		case "build-timeout", "copy-stall", "stall-after", "confirm-window":
			dur, err := time.ParseDuration(a.SingleVal(t))
			if err != nil {
				d.Fatalf(t, "%s: %v", a.Key, err)
			}
			*map[string]*time.Duration{"build-timeout": &o.Conductor.BuildTimeout, "copy-stall": &o.Conductor.CopyStallTimeout,
				"stall-after": &o.Conductor.StallAfter, "confirm-window": &o.Conductor.ResizeConfirmWindow}[a.Key] = dur
		default:
			d.Fatalf(t, "cloud: unknown option %q", a.Key)
		}
	}
	s.c = New(t, o)
	if sweeps {
		s.runSweeps()
	}
	s.before = s.snap()
	return fmt.Sprintf("%d hosts: %s\n", len(s.c.Hosts), strings.Join(s.c.Hosts, " "))
}

// runSweeps runs the current conductor's periodic work (recovery of
// stalled flows, build timeouts, the resize confirm window) until the
// test or a restart ends it.
func (s *script) runSweeps() {
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	s.stop = cancel
	s.c.Cond.RunOwnership(ctx)
}

func (s *script) boot(t *testing.T, d *datadriven.TestData) error {
	in := records.Instance{UUID: s.c.NewID(), Name: s.name(t, d), Flavor: s.flavor(t, d), Zone: "nova"}
	s.names[in.Name] = in.UUID
	var err error
	if host, ok := d.Arg("on"); ok {
		_, err = s.c.Cond.BootOn(context.Background(), in, host.SingleVal(t))
	} else {
		_, err = s.c.Cond.Boot(context.Background(), in)
	}
	return err
}

func (s *script) move(t *testing.T, d *datadriven.TestData) error {
	uuid, to := s.uuid(t, d), ""
	if a, ok := d.Arg("to"); ok {
		to = a.SingleVal(t)
	}
	var err error
	switch d.Cmd {
	case "live-migrate":
		_, err = s.c.Cond.LiveMigrate(context.Background(), uuid, to)
	case "migrate":
		_, err = s.c.Cond.ColdMigrate(context.Background(), uuid, to)
	case "evacuate":
		_, err = s.c.Cond.Evacuate(context.Background(), uuid, to)
	}
	return err
}

func (s *script) act(t *testing.T, d *datadriven.TestData) error {
	if len(d.CmdArgs) != 2 {
		d.Fatalf(t, "act NAME ACTION")
	}
	req := lifecycle.Request{Action: d.CmdArgs[1].Key, Admin: true}
	if req.Action == lifecycle.Reboot {
		req.RebootType = "SOFT"
	}
	_, done, err := s.c.Cond.Act(context.Background(), s.uuid(t, d), req)
	if err != nil {
		return err
	}
	// The fake driver acts at once (its lifecycle time is 0); the flow
	// ends on its own goroutine.
	select {
	case err = <-done:
		return err
	case <-time.After(10 * time.Second):
		d.Fatalf(t, "%s did not end", req.Action)
		return nil
	}
}

func (s *script) abort(t *testing.T, d *datadriven.TestData) error {
	ms, err := s.c.Backing.ListMigrations(context.Background(), store.MigrationFilter{InstanceUUID: s.uuid(t, d), ActiveOnly: true})
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return fmt.Errorf("instance %s has no active migration", d.CmdArgs[0].Key)
	}
	return s.c.Cond.Abort(context.Background(), ms[0].ID)
}

func (s *script) fail(t *testing.T, d *datadriven.TestData) {
	step, host, uuid, msg := d.CmdArgs[0].Key, s.str(t, d, "host"), "", "injected"
	if a, ok := d.Arg("instance"); ok {
		uuid = s.names[a.SingleVal(t)]
	}
	if a, ok := d.Arg("msg"); ok {
		msg = strings.Join(a.Vals, ", ")
	}
	drv, ok := s.c.Drivers[host]
	if !ok {
		d.Fatalf(t, "fail: no host %q", host)
	}
	drv.FailNext(step, uuid, msg)
}

func (s *script) forceDown(host string, down bool) error {
	_, err := s.c.Backing.UpdateService(context.Background(), host, func(svc *records.Service) error { svc.ForcedDown = down; return nil })
	return err
}

// restart replaces the conductor, as a server restart does: a new one
// over the same store and agents, with none of the old one's memory
// (locks, queues, slots), recovers what the store says was in flight, and
// the agents report to it from now on. (The old one's timers on the
// virtual clock still fire, as a process half-dead would; the tests with
// real processes in internal/e2e kill them for good.)
func (s *script) restart(t *testing.T) {
	if s.stop != nil {
		s.stop()
	}
	o := s.c.Opts.Conductor
	c := s.c.NewConductor(o, 7, conductor.Hooks{
		MigrationDone: func(m records.Migration) { s.c.Done = append(s.c.Done, m) },
		BuildDone:     func(in records.Instance) { s.c.Builds = append(s.c.Builds, in) },
	})
	s.c.Cond = c
	s.c.Route(c)
	if _, err := c.Recover(context.Background()); err != nil {
		t.Fatalf("recovery after the restart: %v", err)
	}
	if s.stop != nil {
		s.runSweeps()
	}
}

func (s *script) show(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	now := s.snap()
	switch what := d.CmdArgs[0].Key; what {
	case "instances":
		for _, name := range sortedKeys(now.instances) {
			fmt.Fprintf(&b, "%s: %s\n", name, now.instances[name])
		}
	case "migrations":
		ids := make([]int64, 0, len(now.migrations))
		for id := range now.migrations {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			fmt.Fprintf(&b, "migration %d: %s\n", id, now.migrations[id])
		}
	case "guests":
		names := s.byUUID()
		for _, h := range s.c.Hosts {
			gs, err := s.c.Drivers[h].Guests(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, g := range gs {
				parts = append(parts, names[g.UUID]+" "+string(g.State))
			}
			slices.Sort(parts)
			if len(parts) == 0 {
				parts = []string{"nothing"}
			}
			fmt.Fprintf(&b, "%s: %s\n", h, strings.Join(parts, ", "))
		}
	case "usage":
		for _, h := range s.c.Hosts {
			fmt.Fprintf(&b, "%s: %s\n", h, resources(s.c.Usage(h)))
		}
	case "allocations":
		// Each instance's consumer, and each active migration's, by
		// provider.
		ctx := context.Background()
		for _, name := range sortedKeys(s.names) {
			fmt.Fprintf(&b, "%s: %s\n", name, allocations(s.c.Allocations(s.names[name])))
			ms, err := s.c.Backing.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: s.names[name], ActiveOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				fmt.Fprintf(&b, "  migration %d: %s\n", m.ID, allocations(s.c.Allocations(m.UUID)))
			}
		}
	default:
		d.Fatalf(t, "show %s: want instances, migrations, usage, allocations or guests", what)
	}
	return b.String()
}

// changes is what moved since the last command, in name and ID order.
func (s *script) changes() string {
	now := s.snap()
	var b strings.Builder
	for _, name := range sortedKeys(now.instances) {
		was, ok := s.before.instances[name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%s: %s\n", name, now.instances[name])
		case was != now.instances[name]:
			fmt.Fprintf(&b, "%s: %s → %s\n", name, was, now.instances[name])
		}
	}
	for _, name := range sortedKeys(s.before.instances) {
		if _, ok := now.instances[name]; !ok {
			fmt.Fprintf(&b, "%s: deleted\n", name)
		}
	}
	ids := make([]int64, 0, len(now.migrations))
	for id := range now.migrations {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		was, ok := s.before.migrations[id]
		switch {
		case !ok:
			fmt.Fprintf(&b, "migration %d: %s\n", id, now.migrations[id])
		case was.head != now.migrations[id].head:
			fmt.Fprintf(&b, "migration %d: %s → %s\n", id, was, now.migrations[id])
		case was.status != now.migrations[id].status:
			fmt.Fprintf(&b, "migration %d (%s): %s → %s\n", id, was.head, was.status, now.migrations[id].status)
		}
	}
	s.before = now
	return b.String()
}

func (s *script) snap() snapshot {
	ctx := context.Background()
	out := snapshot{instances: map[string]string{}, migrations: map[int64]migrationLine{}}
	insts, err := s.c.Backing.ListInstances(ctx, "")
	if err != nil {
		s.t.Fatal(err)
	}
	names := s.byUUID()
	for _, in := range insts {
		out.instances[in.Name] = describe(in)
	}
	ms, err := s.c.Backing.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, m := range ms {
		l := migrationLine{head: fmt.Sprintf("%s of %s %s→%s", m.Type, names[m.InstanceUUID], m.SourceHost, m.DestHost), status: string(m.Status)}
		if m.Error != "" {
			l.status += fmt.Sprintf(" (%s)", m.Error)
		}
		out.migrations[m.ID] = l
	}
	return out
}

// describe is an instance in one line: vm_state[/task] on host (flavor),
// and its fault.
func describe(in records.Instance) string {
	d := string(in.VMState)
	if in.TaskState != records.TaskNone {
		d += "/" + string(in.TaskState)
	}
	host := in.Host
	if host == "" {
		host = "-"
	}
	d += fmt.Sprintf(" on %s (%s)", host, in.Flavor.Name)
	if in.Fault != "" {
		d += fmt.Sprintf(" fault=%q", in.Fault)
	}
	return d
}

// byUUID maps the script's instance UUIDs to their names (deleted
// instances too).
func (s *script) byUUID() map[string]string {
	out := make(map[string]string, len(s.names))
	for name, uuid := range s.names {
		out[uuid] = name
	}
	return out
}

func (s *script) name(t *testing.T, d *datadriven.TestData) string {
	if len(d.CmdArgs) == 0 || len(d.CmdArgs[0].Vals) > 0 {
		d.Fatalf(t, "%s: the instance's name comes first", d.Cmd)
	}
	return d.CmdArgs[0].Key
}

func (s *script) uuid(t *testing.T, d *datadriven.TestData) string {
	name := s.name(t, d)
	uuid, ok := s.names[name]
	if !ok {
		d.Fatalf(t, "%s: no instance named %q", d.Cmd, name)
	}
	return uuid
}

func (s *script) str(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

func (s *script) flavor(t *testing.T, d *datadriven.TestData) records.Flavor {
	name := s.str(t, d, "flavor")
	f, ok := Flavors[name]
	if !ok {
		d.Fatalf(t, "no flavor %q (small, medium, large, huge)", name)
	}
	return f
}

// resources renders an amount, "nothing" when empty.
func resources(r placement.Resources) string {
	if len(r) == 0 {
		return "nothing"
	}
	return r.String()
}

// allocations renders a consumer's allocations by provider.
func allocations(a map[string]placement.Resources) string {
	if len(a) == 0 {
		return "nothing"
	}
	var parts []string
	for _, p := range sortedKeys(a) {
		parts = append(parts, p+" "+a[p].String())
	}
	return strings.Join(parts, "; ")
}
