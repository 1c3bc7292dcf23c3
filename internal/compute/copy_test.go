package compute_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
)

// copyDriver is a driver whose copies outlive the agent (a DetachedCopier)
// and can be taken back (RevertCopy). Only the copy's methods are
// implemented.
type copyDriver struct {
	compute.Driver
	outcome   error // what every copy ends with
	resumable []compute.Guest
	reverted  []string
}

func (d *copyDriver) LiveMigration(_ context.Context, _ int64, _ records.Instance, _ string, _ map[string]string,
	progress func(total, processed, remaining int64), done func(error)) {
	go func() { progress(100, 50, 50); done(d.outcome) }()
}
func (d *copyDriver) Resumable() []compute.Guest { out := d.resumable; d.resumable = nil; return out }
func (d *copyDriver) Reattach(_ context.Context, _ string, progress func(total, processed, remaining int64), done func(error)) {
	go func() { done(d.outcome) }()
}
func (d *copyDriver) RevertCopy(_ context.Context, uuid string) error {
	d.reverted = append(d.reverted, uuid)
	return nil
}
func (d *copyDriver) DestinationOf(string) string                 { return "h2" }
func (d *copyDriver) CheckIncoming(context.Context, string) error { return nil }

// peers answers CheckIncoming for every host with err.
type peers struct{ err error }

func (p peers) Peer(string) (compute.Peer, error) { return p, nil }
func (p peers) CheckCanLiveMigrateSource(context.Context, records.Instance, string) error {
	return nil
}
func (p peers) CheckIncoming(context.Context, string) error { return p.err }

// copyReports records what the manager reports.
type copyReports struct{ done chan error }

func (r *copyReports) BuildDone(context.Context, string, string, error) error   { return nil }
func (r *copyReports) CopyProgress(context.Context, int64, int64, int64, int64) {}
func (r *copyReports) CopyDone(_ context.Context, migID int64, err error) error {
	r.done <- err
	return nil
}
func (r *copyReports) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no copy outcome reported")
		return nil
	}
}

func TestCopyOutcomeCheckedWithTheDestination(t *testing.T) {
	inst := records.Instance{UUID: "i1", Flavor: records.Flavor{VCPUs: 1, RAMMB: 64}}
	cancelled := fmt.Errorf("copy of i1: %w", compute.ErrCopyCancelled)
	cases := []struct {
		name     string
		outcome  error
		destErr  error
		want     string // "" for success; else a substring of the reported error
		reverted bool
	}{
		{"completed, destination holds the guest", nil, nil, "", false},
		{"completed, destination lost it: taken back", nil, errors.New("gone"), "lost the incoming guest", true},
		{"failed: the destination says why", errors.New("broken pipe"), errors.New("Size mismatch"), "broken pipe; the destination h2 lost the incoming guest: Size mismatch", false},
		{"cancelled: the destination is not asked", cancelled, errors.New("load failed"), "memory copy cancelled", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, hostConfig())
			drv := &copyDriver{outcome: c.outcome}
			rep := &copyReports{done: make(chan error, 1)}
			m := compute.NewManager("h1", drv, e.tracker, peers{err: c.destErr}, rep, e.clk, nil)
			mg := e.copying(inst.UUID, "h1", "h2")
			if err := m.LiveMigration(ctx, mg.ID, mg.Version, inst, "h2", nil); err != nil {
				t.Fatal(err)
			}
			err := rep.wait(t)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("reported %v, want success", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("reported %v, want an error with %q", err, c.want)
			case c.want == "memory copy cancelled" && strings.Contains(err.Error(), "load failed"):
				t.Fatalf("a cancelled copy asked the destination: %v", err)
			}
			if got := len(drv.reverted) == 1; got != c.reverted {
				t.Fatalf("reverted %v, want %v", drv.reverted, c.reverted)
			}
		})
	}
}

func TestResumeCopies(t *testing.T) {
	e := newEnv(t, hostConfig())
	drv := &copyDriver{resumable: []compute.Guest{{UUID: "i1", State: compute.GuestMigrating, MigrationID: 9}}}
	rep := &copyReports{done: make(chan error, 1)}
	m := compute.NewManager("h1", drv, e.tracker, peers{}, rep, e.clk, nil)
	if n := m.ResumeCopies(ctx); n != 1 {
		t.Fatalf("resumed %d copies, want 1", n)
	}
	if err := rep.wait(t); err != nil {
		t.Fatalf("the resumed copy reported %v", err)
	}
	if n := m.ResumeCopies(ctx); n != 0 {
		t.Fatalf("resumed %d copies again", n)
	}
}
