package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/memory"
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
// on; a refusal prints "error: …" ("error (invalid state): …" when the
// conductor refused for the instance's or migration's state, "error (bad
// request)" or "error (capacity)" for those refusals). The
// commands (NAME is an instance's name; D a duration such as 8s; G a
// server group's name; M a migration: its ID, as migration=N, or NAME for
// the instance's active one; a NAME no command created stands for an
// instance that does not exist):
//
//	cloud [hosts=N] [legacy] [max-concurrent=N] [max-attempts=N]
//	      [per-dest=N] [total=N] [cpu-ratio=F] [subset=N] [gpus] [sweeps]
//	      [build-timeout=D] [copy-stall=D] [stall-after=D]
//	      [confirm-window=D] [owner=NAME] [down-time=D] [rebalance-every=D]
//	                                   a new cloud (the first command; a
//	                                   script may start several, one after
//	                                   the other; sweeps runs the conductor's
//	                                   periodic sweeps, and with owner its
//	                                   heartbeats as replica NAME; per-dest
//	                                   and total cap incoming and cloud-wide
//	                                   live migrations; rebalance-every runs
//	                                   the periodic rebalance; gpus gives each
//	                                   host hN a child provider rp-hN-gpu
//	                                   with one VGPU; subset is
//	                                   host_subset_size)
//	seed NAME host=H flavor=F [count=N]
//	                                   an ACTIVE instance put there directly
//	                                   (count: N of them, NAME1…NAMEN)
//	boot NAME flavor=F [on=H] [group=G] [hang-up]
//	                                   a boot (on: the admin's forced host;
//	                                   hang-up: asked on a context the client
//	                                   already cancelled)
//	live-migrate NAME [to=H] [hang-up] os-migrateLive
//	migrate NAME [to=H]                a cold migration
//	resize NAME flavor=F
//	confirm NAME | revert NAME         the open resize
//	evacuate NAME [to=H]               (NAME*: each instance whose name
//	                                   starts with NAME, in creation order)
//	abort M | force-complete M | reset M
//	                                   the live migration's abort, force
//	                                   complete, or the operator's reset
//	delete NAME
//	act NAME ACTION [type=HARD]        a server action (stop, start, pause,
//	                                   unpause, suspend, resume, reboot,
//	                                   rescue, shelve, …), waited for
//	group G policy=P [max=N]           a server group (max_server_per_host)
//	fail STEP host=H [instance=NAME] [msg=(TEXT)]
//	                                   the next STEP (spawn, pre_live_migration,
//	                                   live_migration, pause_instance, …) on H
//	                                   fails
//	force-down H | force-up H          the host's service forced down (or up)
//	cut H | mend H                     the conductor's calls to H's agent find
//	                                   no agent (bus.ErrUnavailable), or do
//	                                   again; the agent runs on and reports
//	lose STEP host=H                   the next STEP cast (live_migration,
//	                                   resize_instance) to H is lost: the
//	                                   conductor sent it, the agent never got
//	                                   it (a server killed mid-cast)
//	deliver-lost host=H                that lost cast reaches H's agent now;
//	                                   prints its refusal, if any
//	reports lost | reports delivered   the agents' reports (build done, copy
//	                                   progress and end) are dropped on the
//	                                   way, or reach the conductor again
//	disk full | disk ok                the conductor's store writes fail as a
//	                                   full disk fails them, or succeed again
//	agent-audit H                      H's agent runs its audit now; prints
//	                                   what it found and healed
//	agent-start H                      H's agent starts again: it destroys
//	                                   the guests of the instances evacuated
//	                                   from H and rebuilt elsewhere, then
//	                                   audits (prints both)
//	terminate NAME host=H              H's agent removes the guest (an
//	                                   operator's clean-up)
//	report-build NAME                  the agent's report that the spawn
//	                                   ended well, sent again (a redelivery)
//	drain H… [parallel=N] [dry-run]    a drain plan of the hosts (dry-run:
//	                                   the moves it would make)
//	evacuate-all H                     an evacuate-all plan of a dead host
//	rebalance [seed=N]                 the planner's rebalance plan, stored
//	                                   recommended (or nothing to do)
//	plan PURPOSE NAME=H…               a plan of those moves, recommended
//	approve N | cancel N [abort]       plan N approved, or cancelled (abort:
//	                                   its running moves aborted too)
//	tick                               one round of the plan executor
//	run-plans                          the executor and the clock, a tick
//	                                   then a second, until every plan ended;
//	                                   prints the time it took and the most
//	                                   moves in flight at once (in all, out of
//	                                   one host, into one host)
//	disable H | enable H               the host's service disabled (enabled)
//	replica NAME                       another keel server (Owner NAME) over
//	                                   the same store and agents: it
//	                                   recovers, then heartbeats and sweeps
//	kill NAME                          that replica (or the cloud's own
//	                                   conductor, by its owner name) stops
//	                                   heartbeating and sweeping: it died
//	route NAME | use NAME              the agents' reports go to that replica
//	                                   (use: and so do the script's commands)
//	advance D                          the virtual clock moves on
//	restart                            the server restarts: a new conductor
//	                                   over the same store and agents
//	                                   recovers (prints how many flows)
//	strand NAME task=T [migration=TYPE [plan=N move=I]]
//	                                   the instance gets task T and no
//	                                   migration, or one of TYPE recorded
//	                                   with it and no step saved (for plan
//	                                   N's move I, saved starting): what a
//	                                   server killed mid-start leaves
//	audit                              the invariants (Violations), or ok
//	show instances|migrations|usage|allocations|guests|records|quota|hooks
//	                                   the state, whole (allocations: each
//	                                   instance's, and its migration's;
//	                                   guests: the hypervisors'; records: the
//	                                   hosts' stored records; quota: the
//	                                   cores, RAM and instances counted;
//	                                   hooks: what the conductor's
//	                                   MigrationDone and BuildDone hooks saw)
//	show plans|services|moved          the plans with their moves; each
//	                                   host's service (disabled, forced
//	                                   down); each instance's completed
//	                                   migrations
//	show migration N                   one migration's record in full (tried
//	                                   hosts, attempts, times since the
//	                                   epoch, memory copied, owner,
//	                                   interrupted, plan)
//	show instance NAME                 one instance's record: its state and
//	                                   version, and its resize flavor, build
//	                                   phase, action and action phase when
//	                                   set
//	show group G                       the group's members
//
// Flavors are small, medium, large and huge (Flavors), tiny (1 vCPU, 512
// MiB, 1 GB) and, for gpus clouds, gsmall and gmedium (small and medium
// with one VGPU in a granular group, which only the child providers
// hold).
//
// Every script also checks, at each migration record the conductor saves
// with a final status, that its instance has already settled (no task, on
// the destination once completed), failing the test if not.
func RunScripts(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := &script{t: t, names: map[string]string{}, groups: map[string]string{}}
			datadriven.RunTest(t, f, s.run)
		})
	}
}

type script struct {
	t      *testing.T
	c      *Cloud
	names  map[string]string // instance name → UUID
	groups map[string]string // server group name → UUID
	before snapshot
	stop   context.CancelFunc // the sweeps of the current conductor
	gpus   bool               // the hosts have VGPU children
	// replicas are the keel servers the script started besides the
	// cloud's own conductor, by name.
	replicas map[string]*replica
	// diskFull makes the conductor's store writes fail.
	diskFull atomic.Bool
}

// scriptFlavors are the flavors scripts name beyond Flavors.
var scriptFlavors = map[string]records.Flavor{
	"tiny":    {ID: "tiny", Name: "tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1},
	"gsmall":  {ID: "gsmall", Name: "gsmall", VCPUs: 1, RAMMB: 2048, DiskGB: 20, ExtraSpecs: map[string]string{"resources1:VGPU": "1"}},
	"gmedium": {ID: "gmedium", Name: "gmedium", VCPUs: 4, RAMMB: 8192, DiskGB: 40, ExtraSpecs: map[string]string{"resources1:VGPU": "1"}},
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
		s.seed(t, d)
	case "boot":
		err = s.boot(t, d)
	case "live-migrate", "migrate":
		err = s.move(t, d)
	case "evacuate":
		out, err = s.evacuate(t, d)
	case "resize":
		_, err = s.c.Cond.Resize(context.Background(), s.uuid(t, d), s.flavor(t, d))
	case "confirm":
		err = s.c.Cond.ConfirmResize(context.Background(), s.uuid(t, d))
	case "revert":
		err = s.c.Cond.RevertResize(context.Background(), s.uuid(t, d))
	case "abort", "force-complete", "reset":
		err = s.onMigration(t, d)
	case "delete":
		err = s.c.Cond.Delete(context.Background(), s.uuid(t, d))
	case "act":
		err = s.act(t, d)
	case "group":
		err = s.group(t, d)
	case "fail":
		s.fail(t, d)
	case "cut", "mend":
		s.c.Cut(d.CmdArgs[0].Key, d.Cmd == "cut")
	case "lose":
		if lerr := s.c.Lose(s.str(t, d, "host"), d.CmdArgs[0].Key); lerr != nil {
			d.Fatalf(t, "%v", lerr)
		}
	case "deliver-lost":
		err = s.c.DeliverLost(s.str(t, d, "host"))
	case "force-down", "force-up":
		err = s.forceDown(d.CmdArgs[0].Key, d.Cmd == "force-down")
	case "reports":
		s.reports(t, d)
	case "disk":
		s.disk(t, d)
	case "agent-audit":
		return s.agentAudit(t, d)
	case "agent-start":
		return s.agentStart(t, d)
	case "report-build":
		err = s.reportBuild(t, d)
	case "terminate":
		err = s.agent(t, s.str(t, d, "host")).TerminateInstance(context.Background(), s.uuid(t, d))
	case "advance":
		var dur time.Duration
		if dur, err = time.ParseDuration(d.CmdArgs[0].Key); err == nil {
			s.c.Advance(dur)
		}
	case "restart":
		out = s.restart(t)
	case "strand":
		err = s.strand(t, d)
	case "restart-agent":
		// The source agent restarts: its copies end at once, reported
		// interrupted by the restart (what keel agent reports at start).
		host := s.str(t, d, "host")
		drv, ok := s.c.Drivers[host]
		if !ok {
			d.Fatalf(t, "restart-agent: no host %q", host)
		}
		drv.InterruptCopies()
	case "audit":
		if v := s.c.Violations(); len(v) > 0 {
			return strings.Join(v, "\n") + "\n"
		}
		return "ok\n"
	case "show":
		return s.show(t, d)
	default:
		var ok bool
		if out, err, ok = s.planCommand(t, d); !ok {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
	}
	if err != nil {
		out += refusal(err) + "\n"
	}
	s.c.Settle()
	return out + s.changes()
}

// refusal is an error as a script prints it.
func refusal(err error) string {
	var inv *conductor.InvalidStateError
	var bad *conductor.BadRequestError
	var capacity *conductor.CapacityError
	switch {
	case errors.As(err, &inv):
		return "error (invalid state): " + err.Error()
	case errors.As(err, &bad):
		return "error (bad request): " + err.Error()
	case errors.As(err, &capacity):
		return "error (capacity): " + err.Error()
	}
	return "error: " + err.Error()
}

func (s *script) newCloud(t *testing.T, d *datadriven.TestData) string {
	o := Options{Store: func(m *memory.Store) store.Store { return scriptStore{Store: m, s: s} }}
	var sweeps, gpus bool
	var subset int
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "hosts":
			a.Scan(t, 0, &o.Hosts)
		case "legacy":
			o.Legacy = true
		case "max-concurrent":
			a.Scan(t, 0, &o.Conductor.MaxConcurrentLiveMigrations)
		case "max-attempts":
			a.Scan(t, 0, &o.Conductor.MaxAttempts)
		case "cpu-ratio":
			a.Scan(t, 0, &o.CPURatio)
		case "subset":
			a.Scan(t, 0, &subset)
			o.Scheduler = func(c *scheduler.Config) { c.HostSubsetSize = subset }
		case "gpus":
			gpus = true
		case "owner":
			o.Conductor.Owner = a.SingleVal(t)
		case "per-dest":
			a.Scan(t, 0, &o.Conductor.MaxConcurrentIncomingLiveMigrations)
		case "total":
			a.Scan(t, 0, &o.Conductor.MaxConcurrentLiveMigrationsTotal)
		case "sweeps":
			sweeps = true
		case "build-timeout", "copy-stall", "stall-after", "confirm-window", "down-time", "rebalance-every":
			dur, err := time.ParseDuration(a.SingleVal(t))
			if err != nil {
				d.Fatalf(t, "%s: %v", a.Key, err)
			}
			*map[string]*time.Duration{"build-timeout": &o.Conductor.BuildTimeout, "copy-stall": &o.Conductor.CopyStallTimeout,
				"stall-after": &o.Conductor.StallAfter, "confirm-window": &o.Conductor.ResizeConfirmWindow,
				"down-time": &o.Conductor.ServiceDownTime, "rebalance-every": &o.Conductor.RebalanceInterval}[a.Key] = dur
		default:
			d.Fatalf(t, "cloud: unknown option %q", a.Key)
		}
	}
	s.c = New(t, o)
	s.names, s.groups, s.gpus, s.replicas = map[string]string{}, map[string]string{}, gpus, map[string]*replica{}
	if gpus {
		for _, h := range s.c.Hosts {
			if _, err := s.c.Backing.CreateProvider(context.Background(), placement.Provider{UUID: "rp-" + h + "-gpu", Name: h + "_pgpu0",
				ParentUUID: "rp-" + h, Inventories: placement.Inventories{"VGPU": placement.NewInventory(1)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if o.Conductor.Owner != "" {
		// A replica's start: it heartbeats as it recovers (nothing yet).
		if _, err := s.c.Cond.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if sweeps {
		s.runSweeps()
	}
	if o.Conductor.RebalanceInterval > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s.c.Cond.Plans().RunRebalance(ctx)
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

// seed puts one instance on a host, or count of them named NAME1…NAMEn.
func (s *script) seed(t *testing.T, d *datadriven.TestData) {
	host, name, f := s.str(t, d, "host"), s.name(t, d), s.flavor(t, d)
	if !d.HasArg("count") {
		s.names[name] = s.c.Seed(host, name, f).UUID
		return
	}
	var n int
	d.ScanArgs(t, "count", &n)
	for i := 1; i <= n; i++ {
		in := s.c.Seed(host, fmt.Sprintf("%s%d", name, i), f)
		s.names[in.Name] = in.UUID
	}
}

// evacuate evacuates one instance, or with NAME* each instance whose name
// starts with NAME, in the order they were created (the errors printed).
func (s *script) evacuate(t *testing.T, d *datadriven.TestData) (string, error) {
	name := s.name(t, d)
	prefix, ok := strings.CutSuffix(name, "*")
	if !ok {
		return "", s.move(t, d)
	}
	var uuids []string
	for n, uuid := range s.names {
		if strings.HasPrefix(n, prefix) {
			uuids = append(uuids, uuid)
		}
	}
	slices.Sort(uuids) // NewID's order is creation order
	var out string
	for _, uuid := range uuids {
		if _, err := s.c.Cond.Evacuate(context.Background(), uuid, ""); err != nil {
			out += refusal(err) + "\n"
		}
	}
	return out, nil
}

func (s *script) boot(t *testing.T, d *datadriven.TestData) error {
	in := records.Instance{UUID: s.c.NewID(), Name: s.name(t, d), Flavor: s.flavor(t, d), Zone: "nova"}
	if a, ok := d.Arg("group"); ok {
		g, ok := s.groups[a.SingleVal(t)]
		if !ok {
			d.Fatalf(t, "boot: no group %q", a.SingleVal(t))
		}
		in.Hints = &records.SchedulerHints{Group: g}
	}
	s.names[in.Name] = in.UUID
	ctx := s.ctx(d)
	var err error
	if host, ok := d.Arg("on"); ok {
		_, err = s.c.Cond.BootOn(ctx, in, host.SingleVal(t))
	} else {
		_, err = s.c.Cond.Boot(ctx, in)
	}
	return err
}

// ctx is the context a request is asked on: one already cancelled with
// hang-up (the client hung up right after sending).
func (s *script) ctx(d *datadriven.TestData) context.Context {
	if !d.HasArg("hang-up") {
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func (s *script) move(t *testing.T, d *datadriven.TestData) error {
	uuid, to := s.uuid(t, d), ""
	if a, ok := d.Arg("to"); ok {
		to = a.SingleVal(t)
	}
	var err error
	switch d.Cmd {
	case "live-migrate":
		_, err = s.c.Cond.LiveMigrate(s.ctx(d), uuid, to)
	case "migrate":
		_, err = s.c.Cond.ColdMigrate(context.Background(), uuid, to)
	case "evacuate":
		_, err = s.c.Cond.Evacuate(context.Background(), uuid, to)
	}
	return err
}

func (s *script) act(t *testing.T, d *datadriven.TestData) error {
	if len(d.CmdArgs) < 2 {
		d.Fatalf(t, "act NAME ACTION [type=HARD]")
	}
	req := lifecycle.Request{Action: d.CmdArgs[1].Key, Admin: true}
	if req.Action == lifecycle.Reboot {
		req.RebootType = "SOFT"
		if a, ok := d.Arg("type"); ok {
			req.RebootType = a.SingleVal(t)
		}
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

// onMigration aborts, force-completes or resets a migration: the one
// named by migration=N, or the instance's active one.
func (s *script) onMigration(t *testing.T, d *datadriven.TestData) error {
	ctx := context.Background()
	var id int64
	if a, ok := d.Arg("migration"); ok {
		a.Scan(t, 0, &id)
	} else {
		ms, err := s.c.Backing.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: s.uuid(t, d), ActiveOnly: true})
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return fmt.Errorf("instance %s has no active migration", d.CmdArgs[0].Key)
		}
		id = ms[0].ID
	}
	switch d.Cmd {
	case "abort":
		return s.c.Cond.Abort(ctx, id)
	case "force-complete":
		return s.c.Cond.ForceComplete(ctx, id)
	default:
		_, err := s.c.Cond.ResetMigration(ctx, id)
		return err
	}
}

func (s *script) group(t *testing.T, d *datadriven.TestData) error {
	g := records.ServerGroup{UUID: s.c.NewID(), Name: s.name(t, d), Policy: s.str(t, d, "policy")}
	if d.HasArg("max") {
		d.ScanArgs(t, "max", &g.MaxServerPerHost)
	}
	g, err := s.c.Backing.CreateServerGroup(context.Background(), g)
	if err == nil {
		s.groups[g.Name] = g.UUID
	}
	return err
}

// lostReports takes every report and drops it: a source cut off from the
// servers, or a report held only in the memory of an agent that died.
type lostReports struct{}

func (lostReports) BuildDone(context.Context, string, string, error) error   { return nil }
func (lostReports) CopyProgress(context.Context, int64, int64, int64, int64) {}
func (lostReports) CopyDone(context.Context, int64, error) error             { return nil }

func (s *script) reports(t *testing.T, d *datadriven.TestData) {
	switch d.CmdArgs[0].Key {
	case "lost":
		s.c.Route(lostReports{})
	case "delivered":
		s.c.Route(s.c.Cond)
	default:
		d.Fatalf(t, "reports lost|delivered")
	}
}

func (s *script) disk(t *testing.T, d *datadriven.TestData) {
	switch d.CmdArgs[0].Key {
	case "full":
		s.diskFull.Store(true)
	case "ok":
		s.diskFull.Store(false)
	default:
		d.Fatalf(t, "disk full|ok")
	}
}

func (s *script) agent(t *testing.T, host string) *compute.Manager {
	m, ok := s.c.Agents[host]
	if !ok {
		t.Fatalf("no agent on host %q", host)
	}
	return m
}

// reportBuild sends the conductor the agent's report that the
// instance's spawn ended well, again (as the bus redelivers a report whose
// first answer was lost).
func (s *script) reportBuild(t *testing.T, d *datadriven.TestData) error {
	in, err := s.c.Backing.GetInstance(context.Background(), s.uuid(t, d))
	if err != nil {
		return err
	}
	return s.c.Cond.BuildDone(context.Background(), in.UUID, in.Host, nil)
}

// agentAudit runs a host's audit, naming the instances it found.
func (s *script) agentAudit(t *testing.T, d *datadriven.TestData) string {
	drift, err := s.agent(t, d.CmdArgs[0].Key).Audit(context.Background())
	if err != nil {
		return refusal(err) + "\n"
	}
	out := drift.String()
	for uuid, name := range s.byUUID() {
		out = strings.ReplaceAll(out, uuid, name)
	}
	return out + "\n" + s.changes()
}

// agentStart is what a keel agent does first when it starts again, before
// it serves anything: it destroys the guests of its evacuated instances
// that were rebuilt elsewhere (compute.DestroyEvacuated), then runs its
// first audit. It prints the guests it destroyed and what the audit found.
func (s *script) agentStart(t *testing.T, d *datadriven.TestData) string {
	host := d.CmdArgs[0].Key
	drv, ok := s.c.Drivers[host]
	if !ok {
		d.Fatalf(t, "agent-start: no host %q", host)
	}
	log := s.c.Opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ms, err := compute.DestroyEvacuated(context.Background(), s.c.Backing, drv, host, log)
	if err != nil {
		return refusal(err) + "\n"
	}
	names := s.byUUID()
	out := host + ": destroyed no evacuated guest\n"
	if len(ms) > 0 {
		var gone []string
		for _, m := range ms {
			gone = append(gone, fmt.Sprintf("%s (migration %d to %s)", names[m.InstanceUUID], m.ID, m.DestHost))
		}
		out = host + ": destroyed the evacuated guests of " + strings.Join(gone, ", ") + "\n"
	}
	return out + s.agentAudit(t, d)
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

// strand gives an instance a task (strand a task=migrating) with no
// migration: what a server killed between saving a move's task and
// recording its migration leaves. With migration=TYPE it also records the
// move's migration in the same write, as a move's start does
// (store.BeginMove), and nothing more: what a server killed before the
// migration's first step was saved leaves (no phase, no status).
func (s *script) strand(t *testing.T, d *datadriven.TestData) error {
	ctx := context.Background()
	in, err := s.c.Backing.GetInstance(ctx, s.uuid(t, d))
	if err != nil {
		return err
	}
	in.TaskState, in.UpdatedAt = records.TaskState(s.str(t, d, "task")), s.c.Clock.Now()
	a, ok := d.Arg("migration")
	if !ok {
		_, err = s.c.Backing.UpdateInstance(ctx, in)
		return err
	}
	now := s.c.Clock.Now()
	m := records.Migration{
		UUID: s.c.NewID(), InstanceUUID: in.UUID, Type: a.SingleVal(t), SourceHost: in.Host,
		CreatedAt: now, UpdatedAt: now, Owner: s.c.Opts.Conductor.Owner,
		MemoryTotalBytes: in.Flavor.RAMMB << 20, MemoryRemainingBytes: in.Flavor.RAMMB << 20,
	}
	if d.HasArg("plan") {
		// A plan's move: saved starting (as the plan machine's Begin
		// does) before its migration is recorded naming it.
		var id int64
		var i int
		d.ScanArgs(t, "plan", &id)
		d.ScanArgs(t, "move", &i)
		p, err := s.c.Backing.GetPlan(ctx, id)
		if err != nil {
			return err
		}
		mv := &p.Moves[i]
		mv.State, mv.Attempts, mv.StartedAt = records.MoveStarting, mv.Attempts+1, now
		if _, err := s.c.Backing.UpdatePlan(ctx, p); err != nil {
			return err
		}
		m.PlanMove = &records.MoveRef{Plan: id, Move: i}
	}
	_, _, err = s.c.Backing.BeginMove(ctx, in, m)
	return err
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
func (s *script) restart(t *testing.T) string {
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
	n, err := c.Recover(context.Background())
	if err != nil {
		t.Fatalf("recovery after the restart: %v", err)
	}
	if s.stop != nil {
		s.runSweeps()
	}
	return fmt.Sprintf("recovered %d\n", n)
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
			if s.gpus {
				fmt.Fprintf(&b, "%s-gpu: %s\n", h, resources(s.c.Usage(h+"-gpu")))
			}
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
	case "records":
		for _, h := range s.c.Hosts {
			r, err := s.c.Backing.GetHostRecord(context.Background(), h)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: running_vms=%d vcpus_used=%d memory_mb_used=%d local_gb_used=%d failed_builds=%d\n",
				h, r.RunningVMs, r.VCPUsUsed, r.MemoryMBUsed, r.LocalGBUsed, r.FailedBuilds)
		}
	case "quota":
		insts, err := s.c.Backing.ListInstances(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		u := quota.Count(insts, "")
		fmt.Fprintf(&b, "instances=%d cores=%d ram=%d\n", u.Instances, u.Cores, u.RAM)
	case "hooks":
		names := s.byUUID()
		var done, builds []string
		for _, m := range s.c.Done {
			done = append(done, fmt.Sprintf("%d %s", m.ID, m.Status))
		}
		for _, in := range s.c.Builds {
			builds = append(builds, names[in.UUID]+" "+string(in.VMState))
		}
		fmt.Fprintf(&b, "migrations done: %s\nbuilds done: %s\n", orNothing(done), orNothing(builds))
	case "migration":
		s.showMigration(t, d, &b)
	case "plans":
		s.showPlans(t, &b)
	case "services":
		s.showServices(t, &b)
	case "moved":
		s.showMoved(t, &b)
	case "instance":
		s.showInstance(t, d, &b)
	case "group":
		g, err := s.c.Backing.GetServerGroup(context.Background(), s.groups[d.CmdArgs[1].Key])
		if err != nil {
			t.Fatal(err)
		}
		names := s.byUUID()
		var ms []string
		for _, m := range g.Members {
			ms = append(ms, names[m])
		}
		fmt.Fprintf(&b, "%s (%s): %s\n", g.Name, g.Policy, orNothing(ms))
	default:
		d.Fatalf(t, "show %s: want instances, migrations, usage, allocations, guests, records, quota, hooks, plans, services, moved, migration N or group G", what)
	}
	return b.String()
}

// showMigration prints one migration's record in full.
func (s *script) showMigration(t *testing.T, d *datadriven.TestData, b *strings.Builder) {
	if len(d.CmdArgs) != 2 {
		d.Fatalf(t, "show migration N")
	}
	id, err := strconv.ParseInt(d.CmdArgs[1].Key, 10, 64)
	if err != nil {
		d.Fatalf(t, "show migration N: %v", err)
	}
	m, err := s.c.Backing.GetMigration(context.Background(), id)
	if err != nil {
		fmt.Fprintf(b, "%s\n", refusal(err))
		return
	}
	since := func(at time.Time) string { return "+" + at.Sub(clock.Epoch).String() }
	fmt.Fprintf(b, "migration %d: %s\n", m.ID, s.snap().migrations[m.ID])
	phase := string(m.Phase)
	if phase == "" {
		phase = "-"
	}
	fmt.Fprintf(b, "  phase: %s; tried: %s; attempts: %d\n", phase, orNothing(m.TriedHosts), m.Attempts)
	fmt.Fprintf(b, "  created %s, updated %s\n", since(m.CreatedAt), since(m.UpdatedAt))
	if m.MemoryTotalBytes > 0 {
		fmt.Fprintf(b, "  memory: %d of %d bytes copied, %d remaining\n", m.MemoryProcessedBytes, m.MemoryTotalBytes, m.MemoryRemainingBytes)
	}
	if m.Owner != "" {
		fmt.Fprintf(b, "  owner: %s\n", m.Owner)
	}
	if m.Interrupted {
		fmt.Fprintf(b, "  interrupted: keel's restart ended it\n")
	}
	if m.PlanMove != nil {
		fmt.Fprintf(b, "  plan %d, move %d\n", m.PlanMove.Plan, m.PlanMove.Move)
	}
}

// showInstance prints one instance's record: its state and, when set,
// the fields of the flows in progress.
func (s *script) showInstance(t *testing.T, d *datadriven.TestData, b *strings.Builder) {
	if len(d.CmdArgs) != 2 {
		d.Fatalf(t, "show instance NAME")
	}
	in, err := s.c.Backing.GetInstance(context.Background(), s.uuidOf(d.CmdArgs[1].Key))
	if err != nil {
		fmt.Fprintf(b, "%s\n", refusal(err))
		return
	}
	fmt.Fprintf(b, "%s: %s\n  version: %d\n", in.Name, describe(in), in.Version)
	field := func(name, v string) {
		if v != "" {
			fmt.Fprintf(b, "  %s: %s\n", name, v)
		}
	}
	if in.ResizeFlavor != nil {
		field("resize flavor", in.ResizeFlavor.Name)
	}
	field("build phase", string(in.BuildPhase))
	field("action", in.Action)
	field("action phase", string(in.ActionPhase))
	field("owner", in.Owner)
}

// orNothing joins a list, "nothing" when empty.
func orNothing(xs []string) string {
	if len(xs) == 0 {
		return "nothing"
	}
	return strings.Join(xs, ", ")
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
	if in.ActionError != "" {
		d += fmt.Sprintf(" action_error=%q", in.ActionError)
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

// uuid is the UUID of the instance the command names; a name no command
// created stands for an instance that does not exist.
func (s *script) uuid(t *testing.T, d *datadriven.TestData) string {
	name := s.name(t, d)
	if uuid, ok := s.names[name]; ok {
		return uuid
	}
	return "no-such-instance-" + name
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
		if f, ok = scriptFlavors[name]; !ok {
			d.Fatalf(t, "no flavor %q (small, medium, large, huge, tiny, gsmall, gmedium)", name)
		}
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

// scriptStore is the store the scripts' conductors write through: it
// checks at each migration record saved with a final status that the
// instance has already settled (no task, and on the destination once
// completed: no reader sees a migration ended before its instance
// settled), and fails writes while the script says the disk is full.
type scriptStore struct {
	*memory.Store
	s *script
}

var errDiskFull = errors.New("database or disk is full")

func (st scriptStore) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	if st.s.diskFull.Load() {
		return records.Instance{}, fmt.Errorf("updating instance %s: %w", in.UUID, errDiskFull)
	}
	return st.Store.UpdateInstance(ctx, in)
}

func (st scriptStore) BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	if st.s.diskFull.Load() {
		return records.Instance{}, records.Migration{}, fmt.Errorf("starting the move of instance %s: %w", in.UUID, errDiskFull)
	}
	return st.Store.BeginMove(ctx, in, m)
}

func (st scriptStore) WriteAllocations(ctx context.Context, ws ...placement.AllocationWrite) (placement.WritePlan, error) {
	if st.s.diskFull.Load() {
		return placement.WritePlan{}, fmt.Errorf("writing allocations: %w", errDiskFull)
	}
	return st.Store.WriteAllocations(ctx, ws...)
}

func (st scriptStore) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if st.s.diskFull.Load() {
		return records.Migration{}, fmt.Errorf("updating migration %d: %w", m.ID, errDiskFull)
	}
	if records.MigrationTerminal(m.Status) {
		in, err := st.GetInstance(ctx, m.InstanceUUID)
		onFinalHost := in.Host == m.DestHost || (m.Status != records.MigrationCompleted && in.Host == m.SourceHost)
		if err == nil && (!onFinalHost || in.TaskState != records.TaskNone) {
			st.s.t.Errorf("migration %d (%s→%s) saved %s while its instance is on %q with task %q", m.ID, m.SourceHost, m.DestHost, m.Status, in.Host, in.TaskState)
		}
	}
	return st.Store.UpdateMigration(ctx, m)
}
