package fake_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/records"
)

var ctx = context.Background()

func flavor(ramMB int64) records.Flavor {
	return records.Flavor{ID: "f", Name: "f", VCPUs: 2, RAMMB: ramMB, DiskGB: 20}
}

func instance(uuid string, ramMB int64) records.Instance {
	return records.Instance{UUID: uuid, Name: "vm-" + uuid, Flavor: flavor(ramMB)}
}

func newDriver(t *testing.T, cfg fake.Config) (*fake.Driver, *clock.Virtual) {
	t.Helper()
	clk := clock.NewVirtual(clock.Epoch)
	cfg.Clock = clk
	d, err := fake.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, clk
}

func running(d *fake.Driver, uuid string, ramMB int64) {
	d.AddGuest(compute.Guest{UUID: uuid, Name: "vm-" + uuid, Flavor: flavor(ramMB), State: compute.GuestRunning})
}

// outcome records a done callback: when it ran (relative to the epoch)
// and with what.
type outcome struct {
	calls int
	at    time.Duration
	err   error
}

func (o *outcome) done(clk *clock.Virtual) func(error) {
	return func(err error) {
		o.calls++
		o.at = clk.Now().Sub(clock.Epoch)
		o.err = err
	}
}

func guestState(t *testing.T, d *fake.Driver, uuid string) compute.GuestState {
	t.Helper()
	gs, err := d.Guests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.UUID == uuid {
			return g.State
		}
	}
	return ""
}

func TestSpawnTakesSpawnTime(t *testing.T) {
	cases := []struct {
		name      string
		spawnTime time.Duration
		fault     bool
	}{
		{name: "instant spawn still reports through the clock", spawnTime: 0},
		{name: "spawn takes 30s", spawnTime: 30 * time.Second},
		{name: "failing spawn fails after spawn time", spawnTime: 10 * time.Second, fault: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, clk := newDriver(t, fake.Config{SpawnTime: tc.spawnTime})
			if tc.fault {
				d.FailNext(compute.StepSpawn, "a", "no space left")
			}
			var o outcome
			d.Spawn(ctx, instance("a", 1024), o.done(clk))
			if o.calls != 0 {
				t.Fatal("done called before Spawn returned")
			}
			if !tc.fault && guestState(t, d, "a") != compute.GuestBuilding {
				t.Fatalf("guest state during spawn = %q, want building", guestState(t, d, "a"))
			}
			if tc.spawnTime > 0 {
				clk.Advance(tc.spawnTime - time.Nanosecond)
				if o.calls != 0 {
					t.Fatalf("spawn done after %v, before its %v", o.at, tc.spawnTime)
				}
			}
			clk.Advance(time.Hour)
			if o.calls != 1 || o.at != tc.spawnTime {
				t.Fatalf("done called %d times at %v, want once at %v", o.calls, o.at, tc.spawnTime)
			}
			if tc.fault {
				if o.err == nil || !strings.Contains(o.err.Error(), "no space left") {
					t.Fatalf("err = %v, want the injected failure", o.err)
				}
				if s := guestState(t, d, "a"); s != "" {
					t.Fatalf("failed spawn left a %s guest", s)
				}
				return
			}
			if o.err != nil {
				t.Fatal(o.err)
			}
			if s := guestState(t, d, "a"); s != compute.GuestRunning {
				t.Fatalf("guest state after spawn = %q, want running", s)
			}
		})
	}
}

func TestSpawnOfAnExistingGuestFails(t *testing.T) {
	d, clk := newDriver(t, fake.Config{})
	running(d, "a", 1024)
	var o outcome
	d.Spawn(ctx, instance("a", 1024), o.done(clk))
	clk.Advance(0)
	if o.calls != 1 || o.err == nil || !strings.Contains(o.err.Error(), "already exists") {
		t.Fatalf("done %d times with %v, want one 'already exists' error", o.calls, o.err)
	}
}

func TestSpawnOfAGuestDestroyedWhileBuilding(t *testing.T) {
	d, clk := newDriver(t, fake.Config{SpawnTime: 5 * time.Second})
	var o outcome
	d.Spawn(ctx, instance("a", 1024), o.done(clk))
	clk.Advance(2 * time.Second)
	if err := d.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if o.calls != 1 || o.err == nil || !strings.Contains(o.err.Error(), "destroyed") {
		t.Fatalf("done %d times with %v, want one 'destroyed' error", o.calls, o.err)
	}
}

func TestCopyTimeIsRAMOverBandwidth(t *testing.T) {
	cases := []struct {
		name      string
		bandwidth float64
		ramMB     int64
		want      time.Duration
	}{
		{name: "8 GiB at 1 GiB/s", bandwidth: 1024, ramMB: 8192, want: 8 * time.Second},
		{name: "default bandwidth is 1 GiB/s", bandwidth: 0, ramMB: 8192, want: 8 * time.Second},
		{name: "2 GiB at 512 MiB/s", bandwidth: 512, ramMB: 2048, want: 4 * time.Second},
		{name: "512 MiB at 1 GiB/s", bandwidth: 1024, ramMB: 512, want: 500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, clk := newDriver(t, fake.Config{BandwidthMiBps: tc.bandwidth})
			if got := d.CopyTime(tc.ramMB); got != tc.want {
				t.Fatalf("CopyTime(%d) = %v, want %v", tc.ramMB, got, tc.want)
			}
			// And the copy really takes that long on the clock.
			running(d, "a", tc.ramMB)
			var o outcome
			d.LiveMigration(ctx, 1, instance("a", tc.ramMB), "dst", nil, nil, o.done(clk))
			clk.Advance(tc.want - time.Nanosecond)
			if o.calls != 0 {
				t.Fatalf("copy done at %v, before %v", o.at, tc.want)
			}
			if s := guestState(t, d, "a"); s != compute.GuestMigrating {
				t.Fatalf("guest state during copy = %q, want migrating", s)
			}
			clk.Advance(time.Minute)
			if o.calls != 1 || o.err != nil || o.at != tc.want {
				t.Fatalf("done %d times at %v with %v, want once at %v with nil", o.calls, o.at, o.err, tc.want)
			}
			// The guest stays (migrating) until post_live_migration at the source.
			if s := guestState(t, d, "a"); s != compute.GuestMigrating {
				t.Fatalf("guest state after copy = %q, want migrating", s)
			}
			if err := d.PostLiveMigrationAtSource(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if s := guestState(t, d, "a"); s != "" {
				t.Fatalf("guest still %s after post at source", s)
			}
		})
	}
}

func TestCopyReportsProgress(t *testing.T) {
	type report struct {
		at                          time.Duration
		total, processed, remaining int64
	}
	d, clk := newDriver(t, fake.Config{BandwidthMiBps: 1024, ProgressEvery: time.Second})
	running(d, "a", 8192)
	var got []report
	var o outcome
	d.LiveMigration(ctx, 1, instance("a", 8192), "dst", nil, func(total, processed, remaining int64) {
		got = append(got, report{clk.Now().Sub(clock.Epoch), total, processed, remaining})
	}, o.done(clk))
	clk.Advance(time.Minute)

	total := int64(8192) << 20
	if len(got) != 7 {
		t.Fatalf("got %d progress reports %v, want 7 (at 1s..7s; the 8th instant is the end)", len(got), got)
	}
	for i, r := range got {
		wantAt := time.Duration(i+1) * time.Second
		wantProcessed := total * int64(i+1) / 8
		if r.at != wantAt || r.total != total || r.processed != wantProcessed || r.remaining != total-wantProcessed {
			t.Errorf("report %d = %+v, want at %v processed %d of %d", i, r, wantAt, wantProcessed, total)
		}
	}
	if o.calls != 1 || o.at != 8*time.Second {
		t.Fatalf("done %d times at %v, want once at 8s", o.calls, o.at)
	}
	if p := clk.Pending(); p != 0 {
		t.Fatalf("%d timers still pending after the copy ended", p)
	}
}

func TestNoProgressWithoutProgressEvery(t *testing.T) {
	d, clk := newDriver(t, fake.Config{})
	running(d, "a", 4096)
	reports := 0
	var o outcome
	d.LiveMigration(ctx, 1, instance("a", 4096), "dst", nil, func(int64, int64, int64) { reports++ }, o.done(clk))
	clk.Advance(time.Minute)
	if reports != 0 || o.calls != 1 {
		t.Fatalf("reports=%d done=%d, want 0 and 1", reports, o.calls)
	}
}

// step runs one driver step that can have a fault injected, for instance
// uuid, on a driver prepared so that the step would otherwise succeed.
type faultStep struct {
	step string
	run  func(t *testing.T, d *fake.Driver, clk *clock.Virtual, uuid string) error
}

var faultSteps = []faultStep{
	{step: compute.StepSpawn, run: func(t *testing.T, d *fake.Driver, clk *clock.Virtual, uuid string) error {
		var o outcome
		d.Spawn(ctx, instance(uuid, 1024), o.done(clk))
		clk.Advance(time.Minute)
		_ = d.Destroy(ctx, uuid)
		return o.err
	}},
	{step: compute.StepCheckDestination, run: func(t *testing.T, d *fake.Driver, _ *clock.Virtual, uuid string) error {
		return d.CheckCanLiveMigrateDestination(ctx, instance(uuid, 1024))
	}},
	{step: compute.StepCheckSource, run: func(t *testing.T, d *fake.Driver, _ *clock.Virtual, uuid string) error {
		running(d, uuid, 1024)
		defer d.Destroy(ctx, uuid)
		return d.CheckCanLiveMigrateSource(ctx, instance(uuid, 1024))
	}},
	{step: compute.StepPreLiveMigration, run: func(t *testing.T, d *fake.Driver, _ *clock.Virtual, uuid string) error {
		defer d.RollbackLiveMigrationAtDestination(ctx, uuid)
		_, err := d.PreLiveMigration(ctx, instance(uuid, 1024))
		return err
	}},
	{step: compute.StepLiveMigration, run: func(t *testing.T, d *fake.Driver, clk *clock.Virtual, uuid string) error {
		running(d, uuid, 1024)
		defer d.Destroy(ctx, uuid)
		var o outcome
		d.LiveMigration(ctx, 1, instance(uuid, 1024), "dst", nil, nil, o.done(clk))
		clk.Advance(time.Minute)
		return o.err
	}},
	{step: compute.StepPostAtSource, run: func(t *testing.T, d *fake.Driver, _ *clock.Virtual, uuid string) error {
		running(d, uuid, 1024)
		defer d.Destroy(ctx, uuid)
		return d.PostLiveMigrationAtSource(ctx, uuid)
	}},
	{step: compute.StepPostAtDestination, run: func(t *testing.T, d *fake.Driver, _ *clock.Virtual, uuid string) error {
		d.AddGuest(compute.Guest{UUID: uuid, Flavor: flavor(1024), State: compute.GuestIncoming})
		defer d.Destroy(ctx, uuid)
		return d.PostLiveMigrationAtDestination(ctx, instance(uuid, 1024))
	}},
}

func TestFailNextPerStepAndInstanceConsumedOnce(t *testing.T) {
	for _, fs := range faultSteps {
		t.Run(fs.step, func(t *testing.T) {
			d, clk := newDriver(t, fake.Config{})
			d.FailNext(fs.step, "a", "boom-a")
			// Another instance is not affected.
			if err := fs.run(t, d, clk, "b"); err != nil {
				t.Fatalf("fault for a hit b: %v", err)
			}
			// Other steps are not affected.
			for _, other := range faultSteps {
				if other.step != fs.step {
					if err := other.run(t, d, clk, "a"); err != nil {
						t.Fatalf("fault for %s hit %s: %v", fs.step, other.step, err)
					}
				}
			}
			err := fs.run(t, d, clk, "a")
			if err == nil || !strings.Contains(err.Error(), "boom-a") || !strings.Contains(err.Error(), fs.step) {
				t.Fatalf("err = %v, want the injected boom-a naming %s", err, fs.step)
			}
			if err := fs.run(t, d, clk, "a"); err != nil {
				t.Fatalf("fault not consumed: second run failed with %v", err)
			}
		})
	}
}

func TestFailNextQueuesInOrderAndMatchesAnyInstance(t *testing.T) {
	d, _ := newDriver(t, fake.Config{})
	check := func(uuid string) string {
		err := d.CheckCanLiveMigrateDestination(ctx, instance(uuid, 1024))
		if err == nil {
			return ""
		}
		msg := err.Error()
		return msg[strings.LastIndex(msg, ": ")+2:]
	}
	d.FailNext(compute.StepCheckDestination, "", "first")
	d.FailNext(compute.StepCheckDestination, "b", "for-b")
	d.FailNext(compute.StepCheckDestination, "", "second")
	got := []string{check("a"), check("a"), check("b"), check("a"), check("b")}
	want := []string{"first", "second", "for-b", "", ""}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("faults seen %q, want %q", got, want)
		}
	}
}

func TestFailingCopyTakesHalfItsTimeAndLeavesTheGuestRunning(t *testing.T) {
	d, clk := newDriver(t, fake.Config{ProgressEvery: time.Second})
	running(d, "a", 8192)
	d.FailNext(compute.StepLiveMigration, "a", "link down")
	var o outcome
	d.LiveMigration(ctx, 1, instance("a", 8192), "dst", nil, nil, o.done(clk))
	clk.Advance(time.Minute)
	if o.calls != 1 || o.at != 4*time.Second || o.err == nil || !strings.Contains(o.err.Error(), "link down") {
		t.Fatalf("done %d times at %v with %v, want once at 4s with link down", o.calls, o.at, o.err)
	}
	if s := guestState(t, d, "a"); s != compute.GuestRunning {
		t.Fatalf("guest state = %q, want running", s)
	}
}

func TestCopyOfAGuestThatIsNotRunningFails(t *testing.T) {
	d, clk := newDriver(t, fake.Config{})
	var o outcome
	d.LiveMigration(ctx, 1, instance("ghost", 1024), "dst", nil, nil, o.done(clk))
	clk.Advance(time.Minute)
	if o.calls != 1 || o.err == nil || !strings.Contains(o.err.Error(), "not running") {
		t.Fatalf("done %d times with %v, want one 'not running' error", o.calls, o.err)
	}
}

func TestAbortAndForceComplete(t *testing.T) {
	cases := []struct {
		name      string
		fault     bool
		op        func(d *fake.Driver, ctx context.Context, uuid string) error
		wantErr   string // "" for success
		wantState compute.GuestState
	}{
		{name: "abort stops the copy; the guest keeps running", op: (*fake.Driver).AbortLiveMigration,
			wantErr: "cancelled", wantState: compute.GuestRunning},
		{name: "force complete ends the copy now", op: (*fake.Driver).ForceCompleteLiveMigration,
			wantState: compute.GuestMigrating},
		{name: "force complete of a failing copy still fails", fault: true, op: (*fake.Driver).ForceCompleteLiveMigration,
			wantErr: "injected", wantState: compute.GuestRunning},
		{name: "abort of a failing copy", fault: true, op: (*fake.Driver).AbortLiveMigration,
			wantErr: "cancelled", wantState: compute.GuestRunning},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, clk := newDriver(t, fake.Config{ProgressEvery: time.Second})
			running(d, "a", 8192)
			if tc.fault {
				d.FailNext(compute.StepLiveMigration, "a", "injected")
			}
			var o outcome
			reports := 0
			d.LiveMigration(ctx, 1, instance("a", 8192), "dst", nil, func(int64, int64, int64) { reports++ }, o.done(clk))
			clk.Advance(2 * time.Second)
			before := reports
			if err := tc.op(d, ctx, "a"); err != nil {
				t.Fatal(err)
			}
			// done must not run inside the call: the conductor holds the
			// migration's lock while it asks.
			if o.calls != 0 {
				t.Fatal("done called before the abort/force-complete call returned")
			}
			clk.Advance(0)
			if o.calls != 1 || o.at != 2*time.Second {
				t.Fatalf("done %d times at %v, want once at 2s", o.calls, o.at)
			}
			if tc.wantErr == "" && o.err != nil {
				t.Fatalf("err = %v, want success", o.err)
			}
			if tc.wantErr != "" && (o.err == nil || !strings.Contains(o.err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want one mentioning %q", o.err, tc.wantErr)
			}
			if s := guestState(t, d, "a"); s != tc.wantState {
				t.Fatalf("guest state = %q, want %q", s, tc.wantState)
			}
			clk.Advance(time.Minute)
			if o.calls != 1 {
				t.Fatalf("done called %d times, want once", o.calls)
			}
			if reports != before {
				t.Fatalf("%d progress reports after the copy ended", reports-before)
			}
			// Nothing left to act on.
			for _, op := range []func(*fake.Driver, context.Context, string) error{(*fake.Driver).AbortLiveMigration, (*fake.Driver).ForceCompleteLiveMigration} {
				if err := op(d, ctx, "a"); !errors.Is(err, fake.ErrNoMigration) {
					t.Fatalf("second call err = %v, want ErrNoMigration", err)
				}
			}
		})
	}
}

func TestAbortWithoutACopy(t *testing.T) {
	d, _ := newDriver(t, fake.Config{})
	running(d, "a", 1024)
	err := d.AbortLiveMigration(ctx, "a")
	if !errors.Is(err, fake.ErrNoMigration) || !strings.Contains(err.Error(), "a") {
		t.Fatalf("err = %v, want ErrNoMigration naming the instance", err)
	}
}

func TestSecondCopyOfTheSameGuestFailsAndLeavesTheFirst(t *testing.T) {
	d, clk := newDriver(t, fake.Config{})
	running(d, "a", 8192)
	var first, second outcome
	d.LiveMigration(ctx, 1, instance("a", 8192), "dst", nil, nil, first.done(clk))
	d.LiveMigration(ctx, 1, instance("a", 8192), "dst2", nil, nil, second.done(clk))
	clk.Advance(time.Second)
	if second.calls != 1 || second.err == nil || !strings.Contains(second.err.Error(), "already in progress") {
		t.Fatalf("second copy: %d calls, err %v", second.calls, second.err)
	}
	if err := d.AbortLiveMigration(ctx, "a"); err != nil {
		t.Fatalf("the first copy was lost: %v", err)
	}
	clk.Advance(time.Minute)
	if first.calls != 1 || first.err == nil || first.at != time.Second {
		t.Fatalf("first copy: %d calls at %v, err %v; want aborted at 1s", first.calls, first.at, first.err)
	}
}

func TestMigrationStepsOnTheDestination(t *testing.T) {
	d, _ := newDriver(t, fake.Config{})
	if err := d.CheckCanLiveMigrateDestination(ctx, instance("a", 1024)); err != nil {
		t.Fatal(err)
	}
	data, err := d.PreLiveMigration(ctx, instance("a", 1024))
	if err != nil || data["driver"] != "fake" {
		t.Fatalf("pre_live_migration = %v, %v", data, err)
	}
	if s := guestState(t, d, "a"); s != compute.GuestIncoming {
		t.Fatalf("state after pre = %q, want incoming", s)
	}
	if err := d.CheckCanLiveMigrateDestination(ctx, instance("a", 1024)); err == nil {
		t.Fatal("destination check passed with the guest already there")
	}
	if err := d.PostLiveMigrationAtDestination(ctx, instance("a", 1024)); err != nil {
		t.Fatal(err)
	}
	if s := guestState(t, d, "a"); s != compute.GuestRunning {
		t.Fatalf("state after post = %q, want running", s)
	}
	// Rollback only removes an incoming guest, never a running one.
	if err := d.RollbackLiveMigrationAtDestination(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if s := guestState(t, d, "a"); s != compute.GuestRunning {
		t.Fatalf("rollback removed a running guest (state %q)", s)
	}
	if _, err := d.PreLiveMigration(ctx, instance("a", 1024)); err == nil {
		t.Fatal("pre_live_migration accepted a guest that already runs here")
	}
	if err := d.PostLiveMigrationAtDestination(ctx, instance("nobody", 1024)); err == nil {
		t.Fatal("post at destination without an incoming guest succeeded")
	}
	if _, err := d.PreLiveMigration(ctx, instance("b", 1024)); err != nil {
		t.Fatal(err)
	}
	if err := d.RollbackLiveMigrationAtDestination(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if s := guestState(t, d, "b"); s != "" {
		t.Fatalf("rollback left a %s guest", s)
	}
}

func TestSourceCheckNeedsARunningGuest(t *testing.T) {
	d, _ := newDriver(t, fake.Config{})
	if err := d.CheckCanLiveMigrateSource(ctx, instance("a", 1024)); err == nil {
		t.Fatal("source check passed with no guest")
	}
	running(d, "a", 1024)
	if err := d.CheckCanLiveMigrateSource(ctx, instance("a", 1024)); err != nil {
		t.Fatal(err)
	}
}

func TestStateFileSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent", "guests.json")
	clk := clock.NewVirtual(clock.Epoch)
	d1, err := fake.New(fake.Config{Clock: clk, StateFile: path, SpawnTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	running(d1, "running", 1024)
	running(d1, "migrating", 8192)
	d1.LiveMigration(ctx, 7, instance("migrating", 8192), "dst", nil, nil, func(error) {})
	if _, err := d1.PreLiveMigration(ctx, instance("incoming", 2048)); err != nil {
		t.Fatal(err)
	}
	d1.Spawn(ctx, instance("building", 1024), func(error) {})
	running(d1, "destroyed", 1024)
	if err := d1.Destroy(ctx, "destroyed"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // mid-copy, mid-spawn: then the agent dies

	d2, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]compute.GuestState{
		"running":   compute.GuestRunning,
		"migrating": compute.GuestRunning, // the copy did not survive: it runs where it was
		"incoming":  compute.GuestIncoming,
		"building":  compute.GuestRunning,
	}
	gs, err := d2.Guests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != len(want) {
		t.Fatalf("restored %v, want %v", gs, want)
	}
	for _, g := range gs {
		if want[g.UUID] != g.State {
			t.Errorf("guest %s restored as %q, want %q", g.UUID, g.State, want[g.UUID])
		}
		if g.UUID == "migrating" && g.Flavor.RAMMB != 8192 {
			t.Errorf("guest flavor lost: %+v", g.Flavor)
		}
	}
	// No temporary file is left behind.
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary state file left: %v", err)
	}
	// The restored driver has no copy to abort.
	if err := d2.AbortLiveMigration(ctx, "migrating"); !errors.Is(err, fake.ErrNoMigration) {
		t.Fatalf("abort after restart: %v, want ErrNoMigration", err)
	}
	// It tells, once, which operations the restart cut short.
	cut := map[string]compute.Guest{}
	for _, g := range d2.Interrupted() {
		cut[g.UUID] = g
	}
	if len(cut) != 2 || cut["migrating"].State != compute.GuestMigrating || cut["migrating"].MigrationID != 7 || cut["building"].State != compute.GuestBuilding {
		t.Fatalf("interrupted = %+v, want the copy of migration 7 and the build", cut)
	}
	if again := d2.Interrupted(); len(again) != 0 {
		t.Fatalf("interrupted reported twice: %+v", again)
	}
}

func TestStateFileMissingIsEmpty(t *testing.T) {
	d, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	if gs, _ := d.Guests(ctx); len(gs) != 0 {
		t.Fatalf("guests from nowhere: %v", gs)
	}
}

func TestCorruptStateFileNamesTheFile(t *testing.T) {
	cases := []struct {
		name  string
		write func(path string) error
	}{
		{name: "not json", write: func(p string) error { return os.WriteFile(p, []byte("{\"guests\": [ {"), 0o644) }},
		{name: "wrong shape", write: func(p string) error { return os.WriteFile(p, []byte(`{"guests": {"a": 1}}`), 0o644) }},
		{name: "a directory", write: func(p string) error { return os.Mkdir(p, 0o755) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guests.json")
			if err := tc.write(path); err != nil {
				t.Fatal(err)
			}
			_, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path})
			if err == nil {
				t.Fatal("corrupt state file accepted")
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
		})
	}
}

func TestPostStepFaults(t *testing.T) {
	t.Run("a failed post at the source leaves the stale guest", func(t *testing.T) {
		d, _ := newDriver(t, fake.Config{})
		running(d, "a", 1024)
		d.FailNext(compute.StepPostAtSource, "a", "agent busy")
		if err := d.PostLiveMigrationAtSource(ctx, "a"); err == nil {
			t.Fatal("injected failure not returned")
		}
		if s := guestState(t, d, "a"); s != compute.GuestRunning {
			t.Fatalf("guest %q, want it left in place", s)
		}
	})
	t.Run("a failed post at the destination still leaves the guest running there", func(t *testing.T) {
		d, _ := newDriver(t, fake.Config{})
		if _, err := d.PreLiveMigration(ctx, instance("a", 1024)); err != nil {
			t.Fatal(err)
		}
		d.FailNext(compute.StepPostAtDestination, "a", "port binding failed")
		err := d.PostLiveMigrationAtDestination(ctx, instance("a", 1024))
		if err == nil || !strings.Contains(err.Error(), "port binding failed") {
			t.Fatalf("err = %v, want the injected failure", err)
		}
		if s := guestState(t, d, "a"); s != compute.GuestRunning {
			t.Fatalf("guest %q after a failed post, want running (the copy is done)", s)
		}
	})
}

func TestHypervisorMemoryLimitsSpawnsAndIncomingGuests(t *testing.T) {
	d, clk := newDriver(t, fake.Config{MemoryMB: 10000})
	running(d, "a", 6000)
	var o outcome
	d.Spawn(ctx, instance("b", 5000), o.done(clk))
	clk.Advance(time.Second)
	if o.calls != 1 || o.err == nil || !strings.Contains(o.err.Error(), "not enough memory") {
		t.Fatalf("spawn beyond the host's memory: %+v", o)
	}
	if st := guestState(t, d, "b"); st != "" {
		t.Fatalf("refused guest left behind in state %q", st)
	}
	if _, err := d.PreLiveMigration(ctx, instance("c", 4001)); err == nil || !strings.Contains(err.Error(), "not enough memory") {
		t.Fatalf("incoming guest beyond the host's memory: %v", err)
	}
	if _, err := d.PreLiveMigration(ctx, instance("c", 4000)); err != nil {
		t.Fatalf("incoming guest that fits: %v", err)
	}
	// Its memory is now reserved: a spawn that would have fitted does not.
	var o2 outcome
	d.Spawn(ctx, instance("e", 1), o2.done(clk))
	clk.Advance(time.Second)
	if o2.err == nil {
		t.Fatal("spawn into memory reserved by an incoming guest succeeded")
	}
	// Preparing the same incoming guest again is idempotent.
	if _, err := d.PreLiveMigration(ctx, instance("c", 4000)); err != nil {
		t.Fatalf("second pre_live_migration of the same guest: %v", err)
	}
}

// TestStateFileIsOwnerOnly: the guest state file is written 0600, and one
// an older agent left readable by others is made 0600 when the driver
// loads it, with a log line naming it.
func TestStateFileIsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent", "guests.json")
	d1, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	running(d1, "running", 1024)
	mode := func() os.FileMode {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if m := mode(); m != 0o600 {
		t.Errorf("written state file: %v, want 0600", m)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := fake.New(fake.Config{Clock: clock.NewVirtual(clock.Epoch), StateFile: path, Log: slog.New(slog.NewTextHandler(&buf, nil))}); err != nil {
		t.Fatal(err)
	}
	if m := mode(); m != 0o600 {
		t.Errorf("state file an older agent left 0644, once loaded: %v, want 0600", m)
	}
	if !strings.Contains(buf.String(), path) {
		t.Errorf("no log line names %s: %q", path, buf.String())
	}
}
