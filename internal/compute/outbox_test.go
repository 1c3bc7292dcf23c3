package compute_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
)

// conductorStub is the conductor as an outbox sees it: it refuses reports
// while down, and records the ones it takes.
type conductorStub struct {
	mu    sync.Mutex
	down  bool
	tries int
	taken []string
}

func (c *conductorStub) take(what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tries++
	if c.down {
		return errors.New("no server answered")
	}
	c.taken = append(c.taken, what)
	return nil
}

func (c *conductorStub) BuildDone(_ context.Context, uuid, host string, err error) error {
	if err != nil {
		return c.take("build " + uuid + " failed: " + err.Error())
	}
	return c.take("build " + uuid + " ok")
}
func (c *conductorStub) CopyProgress(context.Context, int64, int64, int64, int64) {}
func (c *conductorStub) CopyDone(_ context.Context, migID int64, err error) error {
	if errors.Is(err, compute.ErrCopyRestarted) {
		return c.take("copy failed: " + err.Error() + " [restarted]")
	}
	if err != nil {
		return c.take("copy failed: " + err.Error())
	}
	return c.take("copy ok")
}

func (c *conductorStub) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

func (c *conductorStub) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.taken...)
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// A report stays on disk, sent again with backoff, until the conductor
// takes it; then its file goes.
func TestOutboxKeepsAReportUntilTaken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	clk := clock.NewVirtual(clock.Epoch)
	c := &conductorStub{down: true}
	o, err := compute.NewOutbox(dir, c, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.BuildDone(ctx, "i1", "h1", nil); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, dir); len(fs) != 1 || fs[0] != "build-i1.json" {
		t.Fatalf("outbox holds %v, want build-i1.json", fs)
	}
	clk.Advance(30 * time.Second)
	if c.tries < 5 || len(c.got()) != 0 {
		t.Fatalf("%d tries, taken %v while the conductor was down", c.tries, c.got())
	}
	if c.tries > 12 {
		t.Fatalf("%d tries in 30 s: no backoff", c.tries)
	}
	if !o.HasBuild("i1") || len(o.Pending()) != 1 {
		t.Fatal("the report is not pending")
	}
	c.setDown(false)
	clk.Advance(6 * time.Second)
	if got := c.got(); len(got) != 1 || got[0] != "build i1 ok" {
		t.Fatalf("taken %v, want the build report once", got)
	}
	if fs := files(t, dir); len(fs) != 0 {
		t.Fatalf("outbox still holds %v after the report was taken", fs)
	}
	if o.HasBuild("i1") {
		t.Fatal("the taken report is still pending")
	}
}

// What one run kept is sent by the next (a kill -9 in between); a second
// report of the same operation while one is pending is dropped.
func TestOutboxReplaysAfterARestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	clk := clock.NewVirtual(clock.Epoch)
	down := &conductorStub{down: true}
	o1, err := compute.NewOutbox(dir, down, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o1.CopyDone(ctx, 7, nil); err != nil {
		t.Fatal(err)
	}
	if err := o1.CopyDone(ctx, 7, errors.New("interrupted")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	if err := o1.BuildDone(ctx, "i2", "h1", errors.New("no guest")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	o1.Stop() // the agent dies with both pending

	up := &conductorStub{}
	o2, err := compute.NewOutbox(dir, up, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := o2.Replay(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Replay: %d, %v; want 2 reports", n, err)
	}
	clk.Advance(time.Second)
	got := strings.Join(up.got(), " | ")
	if got != "copy ok | build i2 failed: no guest" {
		t.Fatalf("the next run sent %q, want the first copy outcome then the build failure", got)
	}
	if fs := files(t, dir); len(fs) != 0 {
		t.Fatalf("outbox still holds %v", fs)
	}
}

// Files that are not reports stop the agent, naming them; a temporary
// file a crash left is removed.
func TestOutboxRefusesACorruptReport(t *testing.T) {
	for _, data := range []string{`{}`, `{"kind":"build_done"}`, `garbage`, `{"kind":"copy_done","migration_id":3,"extra":1}`} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "copy-3.json"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "build-x.json.tmp"), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := compute.NewOutbox(dir, &conductorStub{}, clock.NewVirtual(clock.Epoch), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.Replay(ctx)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "copy-3.json")) || !strings.Contains(err.Error(), "move it away") {
			t.Fatalf("Replay of %s: %v, want a refusal naming the file and what to do", data, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "build-x.json.tmp")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the temporary file is still there: %v", err)
		}
	}
}

// BenchmarkOutboxReport is the cost a report pays for being kept: a
// synced file and directory on the test's disk, then its removal once
// taken.
func BenchmarkOutboxReport(b *testing.B) {
	clk := clock.NewVirtual(clock.Epoch)
	c := &conductorStub{}
	o, err := compute.NewOutbox(filepath.Join(b.TempDir(), "reports"), c, clk, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if err := o.BuildDone(ctx, fmt.Sprintf("i%d", i), "h1", nil); err != nil {
			b.Fatal(err)
		}
		clk.Advance(0)
	}
	if len(o.Pending()) != 0 {
		b.Fatalf("%d reports left", len(o.Pending()))
	}
}

// BenchmarkOutboxReportParallel: many reports at once (a host finishing
// many spawns together), whose syncs the filesystem can share.
func BenchmarkOutboxReportParallel(b *testing.B) {
	c := &conductorStub{}
	o, err := compute.NewOutbox(filepath.Join(b.TempDir(), "reports"), c, clock.Real{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := o.BuildDone(ctx, fmt.Sprintf("i%d", n.Add(1)), "h1", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
