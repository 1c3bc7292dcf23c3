package novaplan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"keel/internal/client"
	"keel/internal/plan"
	"keel/internal/records"
)

// Config is what a data dir's executor needs to reach its cloud, and the
// hosts as they were when the plans were made. It is kept in
// DATA_DIR/cloud.json.
type Config struct {
	Cloud           string            `json:"cloud"`
	CloudsYAML      string            `json:"clouds_yaml"`
	ComputeEndpoint string            `json:"compute_endpoint"`
	NovaConf        string            `json:"nova_conf,omitempty"`
	Hosts           map[string]string `json:"hosts"` // host → provider UUID
}

func configPath(dataDir string) string { return filepath.Join(dataDir, "cloud.json") }

// LoadConfig reads DATA_DIR/cloud.json (ok false when there is none).
func LoadConfig(dataDir string) (Config, bool, error) {
	b, err := os.ReadFile(configPath(dataDir))
	if os.IsNotExist(err) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, false, fmt.Errorf("reading %s: %w", configPath(dataDir), err)
	}
	return c, true, nil
}

// SaveConfig writes DATA_DIR/cloud.json.
func SaveConfig(dataDir string, c Config) error {
	b, _ := json.MarshalIndent(c, "", "  ")
	tmp := configPath(dataDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, configPath(dataDir))
}

// readMaxAge is how old a command's read of the cloud (SaveRead) may be
// for the executor to start from it instead of reading the cloud again.
const readMaxAge = time.Minute

func readPath(dataDir string) string { return filepath.Join(dataDir, "cloud-read.json") }

// SaveRead keeps the cloud a command just read (version checks done,
// every provider's inventories and traits) in DATA_DIR/cloud-read.json:
// the executor it starts refreshes it (client.RefreshNova) instead of
// reading the whole cloud again.
func SaveRead(dataDir string, nc *client.NovaCloud) error {
	b, err := json.Marshal(nc)
	if err != nil {
		return err
	}
	tmp := readPath(dataDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving the cloud's read: %w", err)
	}
	return os.Rename(tmp, readPath(dataDir))
}

// loadRead returns the read SaveRead kept, when it is younger than
// readMaxAge.
func loadRead(dataDir string) (*client.NovaCloud, bool) {
	b, err := os.ReadFile(readPath(dataDir))
	if err != nil {
		return nil, false
	}
	var nc client.NovaCloud
	if json.Unmarshal(b, &nc) != nil || time.Since(nc.TakenAt) > readMaxAge || len(nc.Hosts) == 0 {
		return nil, false
	}
	return &nc, true
}

// DrainOptions are a drain's policy.
type DrainOptions struct {
	Hosts    []string
	Parallel int
	Order    string
}

// Drain plans a drain of hosts on the Nova cloud nc: one move per server
// on them (largest first unless Order says otherwise), stored approved
// (the executor runs it), after disabling the hosts' compute services.
// An unknown host, or a host without servers, is an error and nothing is
// changed.
func Drain(ctx context.Context, c *client.Client, st Store, nc *client.NovaCloud, o DrainOptions) (records.Plan, error) {
	var known []string
	for _, h := range nc.Hosts {
		known = append(known, h.Name)
	}
	for _, h := range o.Hosts {
		if !slices.Contains(known, h) {
			return records.Plan{}, fmt.Errorf("host %s is not a compute host of cloud %s (its hosts: %s): check the name with `openstack hypervisor list`", h, c.Cloud(), strings.Join(known, ", "))
		}
	}
	p := records.Plan{Purpose: records.PlanDrain, State: records.PlanApproved, Hosts: slices.Clone(o.Hosts),
		Options: records.PlanOptions{Parallel: o.Parallel, Order: o.Order}, CreatedAt: time.Now().UTC()}
	for _, h := range o.Hosts {
		for _, s := range nc.Servers {
			if s.Host == h {
				p.Moves = append(p.Moves, records.PlanMove{Instance: s.UUID, Source: h, RAMMB: s.Flavor.RAMMB, State: records.MovePending})
			}
		}
	}
	if err := plan.Order(p.Moves, o.Order); err != nil {
		return records.Plan{}, err
	}
	p, err := st.CreatePlan(ctx, p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("storing the plan: %w", err)
	}
	for _, h := range o.Hosts {
		if err := c.DisableNovaService(ctx, h, true, fmt.Sprintf("keel drain plan %d", p.ID)); err != nil {
			p.State = records.PlanCancelled
			p.Reason = "disabling the hosts failed: " + err.Error()
			for i := range p.Moves {
				p.Moves[i].State = records.MoveCancelled
			}
			_, _ = st.UpdatePlan(ctx, p)
			return records.Plan{}, err
		}
	}
	return p, nil
}

// lockPath is the data dir's executor lock file.
func lockPath(dataDir string) string { return filepath.Join(dataDir, "executor.lock") }

// Lock takes the data dir's executor lock: ok is false when another
// executor holds it. The lock goes with the process.
func Lock(dataDir string) (release func(), ok bool, err error) {
	f, err := os.OpenFile(lockPath(dataDir), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false, nil
	}
	// The file may hold an earlier executor's longer pid: replace it.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, false, err
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return func() { f.Close() }, true, nil
}

// ErrDataDirGone is Run's error when the data dir's lock file is gone or
// is another file: the data dir was removed (a test's temporary one, an
// operator's rm -r), and with it the plans the executor ran.
var ErrDataDirGone = errors.New("the executor's data dir is gone")

// stillHeld reports ErrDataDirGone unless the data dir's lock file is
// still held, the file the executor locked when it started.
func stillHeld(dataDir string, held os.FileInfo) error {
	now, err := os.Stat(lockPath(dataDir))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDirGone, err)
	}
	if !os.SameFile(held, now) {
		return fmt.Errorf("%w: %s is another executor's lock file", ErrDataDirGone, lockPath(dataDir))
	}
	return nil
}

// Run ticks the executor every tick until no plan is active or ctx ends,
// then waits for the starts in flight. The caller holds the data dir's
// lock (Lock); Run ends with ErrDataDirGone, logging it, when the lock
// file is gone or replaced: the plans it ran went with their data dir,
// and a detached executor must not outlive them (retrying a cloud that may
// be gone too, for ever).
func (e *Executor) Run(ctx context.Context, tick time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer e.starts.Wait()
	held, err := os.Stat(lockPath(e.DataDir))
	if err != nil {
		return fmt.Errorf("running the plans of %s: its executor lock: %w", e.DataDir, err)
	}
	for {
		if err := stillHeld(e.DataDir, held); err != nil {
			e.Log.Error("stopping the executor: its data dir is gone", "data_dir", e.DataDir, "err", err)
			cancel() // the starts in flight end with it
			return err
		}
		active, err := e.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			e.init()
			e.Log.Warn("running plans", "err", err)
		}
		if !active && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tick):
		}
	}
}
