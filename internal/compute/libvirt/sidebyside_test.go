//go:build libvirt

package libvirt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"keel/internal/compute/qemu"
	"keel/internal/records"
)

// figures collects the int attributes of the drivers' "migration
// completed" log records.
type figures struct {
	mu   sync.Mutex
	last map[string]map[string]int64
}

func (f *figures) Enabled(context.Context, slog.Level) bool { return true }
func (f *figures) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "qemu migration completed" && r.Message != "libvirt migration completed" && r.Message != "incoming qemu ready" {
		return nil
	}
	m := map[string]int64{}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindInt64 {
			m[a.Key] = a.Value.Int64()
		}
		return true
	})
	f.mu.Lock()
	f.last[r.Message] = m
	f.mu.Unlock()
	return nil
}
func (f *figures) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f *figures) WithGroup(string) slog.Handler      { return f }

func (f *figures) get(msg string) map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[msg]
}

// TestSideBySide migrates the same 64 MiB guest (fill-32) back and forth,
// alternately between two qemu drivers and between two libvirt drivers,
// in one run, and prints each one's wall time (LiveMigration's call to its
// done) and downtime, with where libvirt's time goes: the job's own
// elapsed time, and the rest (Prepare's QEMU start on the destination,
// the RPCs, Finish and Confirm). KEEL_SIDE_BY_SIDE_N sets the migrations
// per driver (default 3).
//
//	go test -tags libvirt -run TestSideBySide -v ./internal/compute/libvirt/
func TestSideBySide(t *testing.T) {
	n := 3
	if s := os.Getenv("KEEL_SIDE_BY_SIDE_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	ctx := context.Background()
	fig := &figures{last: map[string]map[string]int64{}}
	log := slog.New(fig)
	lv := [2]*Driver{newDriver(t, "h01", Config{Log: log}), newDriver(t, "h02", Config{Log: log})}
	var qm [2]*qemu.Driver
	for i := range qm {
		dir := t.TempDir()
		d, err := qemu.New(qemu.Config{Dir: dir, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qemu.KillAll(dir) })
		qm[i] = d
	}
	inst := records.Instance{UUID: "5a1f0c6e-0000-4000-8000-0000000000b1", Name: "bench", Metadata: map[string]string{"keel_guest": "fill-32"},
		Flavor: records.Flavor{ID: "q64", Name: "q64", VCPUs: 1, RAMMB: 64}}
	qinst := inst
	qinst.UUID = "5a1f0c6e-0000-4000-8000-0000000000b2"
	spawn(t, lv[0], inst)
	ch := make(chan error, 1)
	qm[0].Spawn(ctx, qinst, func(err error) { ch <- err })
	if err := waitDone(t, ch, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitRising(t, lv[0], inst.UUID, 0)
	time.Sleep(time.Second) // both guests fill their 32 MiB

	var qWall, qDown, qStart, lWall, lDown, lJob, lPrep []float64
	for i := range n {
		from, to := i%2, (i+1)%2
		// qemu: pre_live_migration starts the destination QEMU, then the copy.
		start := time.Now()
		data, err := qm[to].PreLiveMigration(ctx, qinst)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		qm[from].LiveMigration(ctx, int64(100+i), qinst, "q", data, nil, func(err error) { done <- err })
		if err := waitDone(t, done, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		wall := time.Since(start)
		if err := qm[to].PostLiveMigrationAtDestination(ctx, qinst); err != nil {
			t.Fatal(err)
		}
		if err := qm[from].PostLiveMigrationAtSource(ctx, qinst.UUID); err != nil {
			t.Fatal(err)
		}
		q := fig.get("qemu migration completed")
		qWall, qDown = append(qWall, ms(wall)), append(qDown, float64(q["downtime_ms"]))
		qStart = append(qStart, float64(fig.get("incoming qemu ready")["start_ms"]))
		t.Logf("qemu    %d: wall %5.0f ms (dest QEMU start %d ms, QEMU total %d ms), downtime %d ms", i, ms(wall), fig.get("incoming qemu ready")["start_ms"], q["total_ms"], q["downtime_ms"])

		// libvirt: pre_live_migration writes the disk; libvirt does the rest.
		start = time.Now()
		err, _ = migrate(t, lv[from], lv[to], int64(200+i), inst, nil)
		wall = time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if err := lv[to].PostLiveMigrationAtDestination(ctx, inst); err != nil {
			t.Fatal(err)
		}
		if err := lv[from].PostLiveMigrationAtSource(ctx, inst.UUID); err != nil {
			t.Fatal(err)
		}
		l := fig.get("libvirt migration completed")
		lWall, lDown, lJob = append(lWall, ms(wall)), append(lDown, float64(l["downtime_ms"])), append(lJob, float64(l["total_ms"]))
		lPrep = append(lPrep, float64(l["prepare_ms"]))
		t.Logf("libvirt %d: wall %5.0f ms (until memory flowed, Prepare: %d ms; libvirt job %d ms), downtime %d ms", i, ms(wall), l["prepare_ms"], l["total_ms"], l["downtime_ms"])
	}
	waitRising(t, lv[n%2], inst.UUID, 0)
	fmt.Printf("side by side, 64 MiB guest (fill-32), %d migrations each, medians: qemu %.2f s downtime %.0f ms (dest QEMU start %.0f ms) | libvirt %.2f s downtime %.0f ms (Prepare %.2f s, libvirt job %.2f s)\n",
		n, med(qWall)/1000, med(qDown), med(qStart), med(lWall)/1000, med(lDown), med(lPrep)/1000, med(lJob)/1000)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func med(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
