package compute

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"keel/internal/clock"
)

// Outbox is a Reporter that keeps every build and copy report on disk, in
// its own directory, until the conductor has taken it (next answered nil):
// a report survives a kill -9 of the agent, and a restarted agent sends
// what is there again (Replay). Each report is one file, written to a
// temporary name, synced, renamed into place and its directory synced, and
// removed once taken.
//
// BuildDone and CopyDone return nil once a report is on disk (delivery
// goes on in the background, retried with backoff for as long as the
// agent runs), or an error when a report of success cannot be kept: the
// caller then fails the operation rather than leave a success only in
// memory. A report of failure that cannot be kept is still delivered from
// memory (best effort: if it is lost too, the agent's restart derives it
// again from the store — no guest, no copy).
//
// A second report for the same build or copy while the first is pending
// is dropped: the first outcome is the one that happened.
type Outbox struct {
	dir   string
	next  Reporter
	clock clock.Clock
	log   *slog.Logger

	// RetryMin and RetryMax bound the backoff between deliveries of one
	// report (defaults 100 ms and 5 s).
	RetryMin, RetryMax time.Duration

	mu      sync.Mutex
	pending map[string]*outboxEntry
	stopped bool
}

// outboxEntry is one kept report.
type outboxEntry struct {
	Report  OutboxReport
	durable bool
	wait    time.Duration
	tries   int
	timer   clock.Timer
}

// OutboxReport is a report as the outbox keeps it.
type OutboxReport struct {
	// Kind is "build_done" or "copy_done".
	Kind         string `json:"kind"`
	InstanceUUID string `json:"instance_uuid,omitempty"`
	Host         string `json:"host,omitempty"`
	MigrationID  int64  `json:"migration_id,omitempty"`
	Failed       bool   `json:"failed"`
	Error        string `json:"error,omitempty"`
	// Restarted: the copy ended because the source agent restarted
	// (ErrCopyRestarted), not for anything the destination did.
	Restarted bool      `json:"restarted,omitempty"`
	At        time.Time `json:"at"`
}

// ErrCopyRestarted is wrapped by the error a source agent reports for a
// copy its own restart cut short: the move is not at fault, and a plan
// retries it without counting an attempt nor avoiding the destination.
var ErrCopyRestarted = errors.New("memory copy interrupted: the source agent restarted")

// Report kinds.
const (
	ReportBuildDone = "build_done"
	ReportCopyDone  = "copy_done"
)

func (r OutboxReport) key() string {
	if r.Kind == ReportCopyDone {
		return fmt.Sprintf("copy-%d", r.MigrationID)
	}
	return "build-" + safeName(r.InstanceUUID)
}

func (r OutboxReport) err() error {
	if !r.Failed {
		return nil
	}
	if r.Restarted {
		return restartedError(r.Error)
	}
	return errors.New(r.Error)
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

func safeName(s string) string {
	if plainName.MatchString(s) {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "h" + hex.EncodeToString(h[:12])
}

var (
	_ Reporter     = (*Outbox)(nil)
	_ ReportKeeper = (*Outbox)(nil)
)

// ErrReportNotKept is wrapped by a Reporter's error when a report could
// not be kept durably (the agent's disk is full): the agent then fails
// the operation instead of leaving its success only in memory.
var ErrReportNotKept = errors.New("report could not be kept")

// NewOutbox returns an outbox keeping its reports in dir (created if
// needed) and delivering them through next, whose BuildDone and CopyDone
// must make one attempt and answer an error when the report was not taken
// (it is then sent again). Call Replay once to send what a previous run
// left.
func NewOutbox(dir string, next Reporter, clk clock.Clock, log *slog.Logger) (*Outbox, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report outbox %s: %w", dir, err)
	}
	return &Outbox{dir: dir, next: next, clock: clk, log: log, pending: map[string]*outboxEntry{}}, nil
}

// Replay reads the reports a previous run left in the directory and sends
// them again; it returns how many. A file that is not a report is refused
// (the agent does not start on a corrupt outbox), naming it.
func (o *Outbox) Replay(ctx context.Context) (int, error) {
	ctx = context.WithoutCancel(ctx)
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return 0, fmt.Errorf("report outbox %s: %w", o.dir, err)
	}
	var reports []OutboxReport
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(o.dir, name)
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(path) // a write a crash cut short: never renamed, never taken
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("report outbox: reading %s: %w", path, err)
		}
		var r OutboxReport
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil || (r.Kind != ReportBuildDone && r.Kind != ReportCopyDone) ||
			(r.Kind == ReportBuildDone && r.InstanceUUID == "") || (r.Kind == ReportCopyDone && r.MigrationID == 0) ||
			r.key()+".json" != name {
			return 0, fmt.Errorf("report outbox: %s is not a report this agent wrote (%v); move it away to start without it (its build or copy is then settled from the store)", path, err)
		}
		reports = append(reports, r)
	}
	sort.SliceStable(reports, func(i, j int) bool { return reports[i].At.Before(reports[j].At) })
	o.mu.Lock()
	for _, r := range reports {
		if _, ok := o.pending[r.key()]; ok {
			continue
		}
		e := &outboxEntry{Report: r, durable: true}
		o.pending[r.key()] = e
		o.scheduleLocked(ctx, e, 0)
	}
	o.mu.Unlock()
	if len(reports) > 0 {
		o.log.Info("sending again the reports a previous run left", "reports", len(reports), "dir", o.dir)
	}
	return len(reports), nil
}

// BuildDone implements Reporter.
func (o *Outbox) BuildDone(ctx context.Context, instanceUUID, host string, buildErr error) error {
	r := OutboxReport{Kind: ReportBuildDone, InstanceUUID: instanceUUID, Host: host, Failed: buildErr != nil, Error: errText(buildErr), At: o.clock.Now()}
	return o.keep(ctx, r)
}

// CopyProgress implements Reporter: progress is not kept (the next
// report replaces a lost one).
func (o *Outbox) CopyProgress(ctx context.Context, migID int64, total, processed, remaining int64) {
	o.next.CopyProgress(ctx, migID, total, processed, remaining)
}

// CopyDone implements Reporter.
func (o *Outbox) CopyDone(ctx context.Context, migID int64, copyErr error) error {
	r := OutboxReport{Kind: ReportCopyDone, MigrationID: migID, Failed: copyErr != nil, Error: errText(copyErr),
		Restarted: errors.Is(copyErr, ErrCopyRestarted), At: o.clock.Now()}
	return o.keep(ctx, r)
}

// Pending returns the reports not yet taken, oldest first.
func (o *Outbox) Pending() []OutboxReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]OutboxReport, 0, len(o.pending))
	for _, e := range o.pending {
		out = append(out, e.Report)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// HasBuild and HasCopy report whether a report of that build or copy is
// pending.
func (o *Outbox) HasBuild(instanceUUID string) bool {
	return o.has(OutboxReport{Kind: ReportBuildDone, InstanceUUID: instanceUUID}.key())
}

// HasCopy reports whether a report of migration migID's copy is pending.
func (o *Outbox) HasCopy(migID int64) bool {
	return o.has(OutboxReport{Kind: ReportCopyDone, MigrationID: migID}.key())
}

func (o *Outbox) has(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.pending[key]
	return ok
}

// Stop ends the deliveries; what is pending stays on disk for the next
// run's Replay.
func (o *Outbox) Stop() {
	o.mu.Lock()
	o.stopped = true
	for _, e := range o.pending {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	o.mu.Unlock()
}

func (o *Outbox) keep(ctx context.Context, r OutboxReport) error {
	ctx = context.WithoutCancel(ctx)
	key := r.key()
	o.mu.Lock()
	if o.stopped {
		// The agent is stopping: nothing more is written (its data
		// directory may be going away). The next start's reconcile
		// reports the operation from what the hypervisor has.
		o.mu.Unlock()
		o.log.Info("agent stopping: a report is left to the next start", "report", r.Kind, "instance", r.InstanceUUID, "migration", r.MigrationID)
		return nil
	}
	if _, ok := o.pending[key]; ok {
		o.mu.Unlock()
		o.log.Info("a report of this operation is already pending; keeping the first", "report", r.Kind, "instance", r.InstanceUUID, "migration", r.MigrationID)
		return nil
	}
	e := &outboxEntry{Report: r}
	o.pending[key] = e // reserved: a concurrent second report is dropped
	o.mu.Unlock()

	data, _ := json.Marshal(r)
	werr := writeSynced(filepath.Join(o.dir, key+".json"), data)
	o.mu.Lock()
	defer o.mu.Unlock()
	if werr != nil && !r.Failed {
		delete(o.pending, key)
		return fmt.Errorf("%w: keeping the %s report on disk (%s): %v", ErrReportNotKept, r.Kind, o.dir, werr)
	}
	if werr != nil {
		o.log.Warn("a failure report could not be kept on disk; sending it from memory", "report", r.Kind, "instance", r.InstanceUUID, "migration", r.MigrationID, "err", werr)
	}
	e.durable = werr == nil
	o.scheduleLocked(ctx, e, 0)
	return nil
}

// scheduleLocked plans the next delivery of e after d; called with mu held.
func (o *Outbox) scheduleLocked(ctx context.Context, e *outboxEntry, d time.Duration) {
	if o.stopped {
		return
	}
	e.timer = o.clock.AfterFunc(d, func() { o.deliver(ctx, e) })
}

// deliver makes one attempt, then forgets the report (taken) or plans the
// next attempt.
func (o *Outbox) deliver(ctx context.Context, e *outboxEntry) {
	r := e.Report
	var err error
	if r.Kind == ReportCopyDone {
		err = o.next.CopyDone(ctx, r.MigrationID, r.err())
	} else {
		err = o.next.BuildDone(ctx, r.InstanceUUID, r.Host, r.err())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.pending, r.key())
		if e.durable {
			if rerr := os.Remove(filepath.Join(o.dir, r.key()+".json")); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				// Sent again after a restart: the conductor answers a
				// repeat without doing anything.
				o.log.Warn("removing a report the conductor took", "report", r.Kind, "err", rerr)
			}
		}
		return
	}
	minW, maxW := o.RetryMin, o.RetryMax
	if minW <= 0 {
		minW = 100 * time.Millisecond
	}
	if maxW <= 0 {
		maxW = 5 * time.Second
	}
	e.wait = min(max(2*e.wait, minW), maxW)
	if e.tries++; e.tries == 1 || e.tries%20 == 0 {
		o.log.Warn("report not taken yet; sending it again", "report", r.Kind, "tries", e.tries, "instance", r.InstanceUUID, "migration", r.MigrationID, "in", e.wait, "err", err)
	}
	o.scheduleLocked(ctx, e, e.wait)
}

// restartedError is a copy's failure as its report said it, wrapping
// ErrCopyRestarted.
type restartedError string

func (e restartedError) Error() string { return string(e) }
func (e restartedError) Unwrap() error { return ErrCopyRestarted }

// RestartedError is the failure of a copy the source agent's restart cut
// short, as a report carried it (msg), wrapping ErrCopyRestarted.
func RestartedError(msg string) error { return restartedError(msg) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// writeSynced replaces path with data durably: a temporary file, synced,
// renamed over path, and the directory synced.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	df, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = df.Sync()
	df.Close()
	return err
}
