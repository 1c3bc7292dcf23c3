package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/config"
	"keel/internal/novaplan"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/store/sqlite"
)

// keel's plans on a Nova cloud: the commands that take --os-cloud of a
// cloud that is not keel keep their plans in a local store and run them
// with a detached executor (package novaplan).

// addNovaFlags adds the flags of a command that also works on a Nova
// cloud.
func addNovaFlags(cmd *cobra.Command, cf *clientFlags, withConf bool) {
	cmd.Flags().StringVar(&cf.dataDir, "data-dir", "", "for a Nova cloud: where keel keeps its plans (default: a per-user directory named after the cloud)")
	if withConf {
		cmd.Flags().StringVar(&cf.novaConf, "nova-conf", "", "for a Nova cloud: its nova.conf, for the scheduler's filters, weighers and options (Nova's defaults without it)")
	}
}

// foreign reports whether c is a Nova cloud rather than keel.
// KEEL_CLOUD_AS_NOVA=1 treats keel as any Nova cloud (keel serves Nova's
// compute API and Placement): the tests drive the Nova path against keel
// with it.
func foreign(ctx context.Context, c *client.Client) (bool, error) {
	if environOf(ctx).getenv("KEEL_CLOUD_AS_NOVA") == "1" {
		return true, nil
	}
	k, err := c.IsKeel(ctx)
	return !k, err
}

// novaDataDir is the data dir of a Nova cloud's plans, in the environ
// env.
func novaDataDir(env environ, cf *clientFlags, cloud string) (string, error) {
	dir := env.path(cf.dataDir)
	if dir == "" {
		base := env.getenv("XDG_STATE_HOME")
		if base == "" {
			home, err := env.homeDir()
			if err != nil {
				return "", fmt.Errorf("no --data-dir and no home directory: pass --data-dir")
			}
			base = filepath.Join(home, ".local", "state")
		}
		dir = filepath.Join(base, "keel", "nova", cloud)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating --data-dir: %w", err)
	}
	return filepath.Abs(dir)
}

func openNovaStore(ctx context.Context, dir string) (*sqlite.Store, error) {
	st, err := sqlite.Open(ctx, filepath.Join(dir, "plans.db"))
	if err != nil {
		return nil, fmt.Errorf("opening the plan store in %s: %w", dir, err)
	}
	return st, nil
}

// novaSetup prepares a plan on a Nova cloud: its data dir (refusing one
// that holds another cloud's plans), the scheduler's options (--nova-conf,
// or Nova's defaults), the cloud read, the plan store (the caller closes
// it) and DATA_DIR/cloud.json written for the executor.
func novaSetup(cmd *cobra.Command, c *client.Client, cf *clientFlags) (string, config.Config, client.NovaCloud, *sqlite.Store, error) {
	ctx := cmd.Context()
	fail := func(err error) (string, config.Config, client.NovaCloud, *sqlite.Store, error) {
		return "", config.Config{}, client.NovaCloud{}, nil, err
	}
	env := environOf(ctx)
	dir, err := novaDataDir(env, cf, c.Cloud())
	if err != nil {
		return fail(err)
	}
	prev, ok, err := novaplan.LoadConfig(dir)
	if err != nil {
		return fail(err)
	}
	if ok && prev.ComputeEndpoint != c.ComputeEndpoint() {
		return fail(fmt.Errorf("--data-dir %s holds the plans of cloud %s at %s, not of %s at %s: pass another --data-dir", dir, prev.Cloud, prev.ComputeEndpoint, c.Cloud(), c.ComputeEndpoint()))
	}
	cfg, err := novaOptions(env.path(cf.novaConf), cmd.ErrOrStderr())
	if err != nil {
		return fail(err)
	}
	if err := cfg.SchedulerConfig().Validate(); err != nil {
		return fail(fmt.Errorf("--nova-conf: %w", err))
	}
	nc, notes, err := c.ReadNova(ctx)
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "keel:", n)
	}
	if err != nil {
		return fail(err)
	}
	conf := novaplan.Config{Cloud: c.Cloud(), CloudsYAML: c.CloudsYAML(), ComputeEndpoint: c.ComputeEndpoint(), Hosts: map[string]string{}}
	if cf.novaConf != "" {
		conf.NovaConf, _ = filepath.Abs(env.path(cf.novaConf))
	}
	for _, h := range nc.Hosts {
		conf.Hosts[h.Name] = h.ProviderUUID
	}
	if ok {
		// Hosts planned before keep the provider they had then.
		for h, u := range prev.Hosts {
			conf.Hosts[h] = u
		}
	}
	if err := novaplan.SaveConfig(dir, conf); err != nil {
		return fail(err)
	}
	if err := novaplan.SaveRead(dir, &nc); err != nil {
		return fail(err)
	}
	st, err := openNovaStore(ctx, dir)
	if err != nil {
		return fail(err)
	}
	return dir, cfg, nc, st, nil
}

// novaDrain plans a drain on a Nova cloud, makes sure an executor runs it,
// and with wait follows it.
func novaDrain(cmd *cobra.Command, c *client.Client, cf *clientFlags, o novaplan.DrainOptions, wait bool) error {
	ctx := cmd.Context()
	dir, cfg, nc, st, err := novaSetup(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := novaplan.Drain(ctx, c, st, &nc, o)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	// Nova's computes copy at live_migration_bandwidth from nova.conf (0,
	// unlimited: the duration is not known before a move is measured).
	pace := plan.PaceOf(p, novaCaps(cfg), float64(cfg.Libvirt.LiveMigrationBandwidth))
	fmt.Fprintf(out, "plan %d: draining %s on %s: %s (%s, order %s); services disabled (keel drain plan %d); plans in %s\n",
		p.ID, strings.Join(p.Hosts, ", "), c.Cloud(), count(len(p.Moves), "move", "moves"), paceText(&pace, p.Options.Parallel), orDefault(p.Options.Order, "largest"), p.ID, dir)
	if err := ensureExecutor(environOf(cmd.Context()), dir); err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(out, "follow it with: keel plan show %d --wait --os-cloud %s --data-dir %s\n", p.ID, c.Cloud(), dir)
		return nil
	}
	return followNovaPlan(cmd, st, dir, c.Cloud(), p.ID, out)
}

// ensureExecutor starts a detached executor on dir, in the environ env,
// unless one runs.
func ensureExecutor(env environ, dir string) error {
	release, ok, err := novaplan.Lock(dir)
	if err != nil {
		return err
	}
	if !ok {
		return nil // one runs: it picks the plan up
	}
	release()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	ex := exec.Command(exe, "nova-executor", "--data-dir", dir)
	ex.Env = append(env.environment(), "KEEL_BE_MAIN=1")
	ex.Stdout, ex.Stderr = logf, logf
	ex.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := ex.Start(); err != nil {
		return fmt.Errorf("starting the plan executor: %w", err)
	}
	return ex.Process.Release()
}

// novaExecutorCommand runs a data dir's plans until none is active: the
// detached process keel host drain starts on a Nova cloud.
func novaExecutorCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "nova-executor",
		Short:  "Run the plans of a Nova cloud's data dir (started by keel host drain --os-cloud NOVA)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			release, ok, err := novaplan.Lock(dir)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			defer release()
			conf, found, err := novaplan.LoadConfig(dir)
			if err != nil || !found {
				return fmt.Errorf("no cloud.json in %s: %v", dir, err)
			}
			c, err := client.Connect(ctx, client.Options{Cloud: conf.Cloud, ConfigFile: conf.CloudsYAML})
			if err != nil {
				return err
			}
			cfg, err := novaOptions(conf.NovaConf, io.Discard)
			if err != nil {
				return err
			}
			st, err := openNovaStore(ctx, dir)
			if err != nil {
				return err
			}
			defer st.Close()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			e := &novaplan.Executor{Client: c, Store: st, Sched: cfg.SchedulerConfig(), DataDir: dir, Log: log, Hosts: conf.Hosts,
				Caps: novaCaps(cfg)}
			log.Info("executor started", "pid", os.Getpid(), "cloud", conf.Cloud)
			return e.Run(ctx, 200*time.Millisecond)
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "the data dir")
	return cmd
}

// novaCaps are the caps from nova.conf: max_concurrent_live_migrations
// per source (Nova's compute runs that many; 0 there means unlimited).
func novaCaps(cfg config.Config) plan.Caps {
	return plan.Caps{PerSource: max(cfg.Default.MaxConcurrentLiveMigrations, 0)}
}

// NovaPlan is plan show's JSON on a Nova cloud: the plan, its progress
// and its figures.
type NovaPlan struct {
	records.Plan
	Progress plan.Summary   `json:"progress"`
	Figures  NovaPlanFigure `json:"figures"`
	MoveFigs []novaMoveFig  `json:"move_figures"`
}

type novaMoveFig struct {
	Instance string `json:"instance"`
	novaplan.MoveFigures
}

// NovaPlanFigure sums a plan's figures.
type NovaPlanFigure struct {
	Moves   int `json:"moves"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	Refused int `json:"refused"`
	// RefusedCapacity counts moves no host could take (keel's scheduler
	// found none).
	RefusedCapacity   int            `json:"refused_capacity"`
	NovaSecondsMedian float64        `json:"nova_seconds_median"`
	NovaSecondsMax    float64        `json:"nova_seconds_max"`
	KeelMSMedian      float64        `json:"keel_ms_median"`
	KeelMSMax         float64        `json:"keel_ms_max"`
	DestCounts        map[string]int `json:"dest_counts"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func novaPlanView(dir string, p records.Plan) NovaPlan {
	figs := novaplan.LoadFigures(dir, p.ID)
	v := NovaPlan{Plan: p, Progress: plan.Summarise(p, time.Now()), Figures: NovaPlanFigure{Moves: len(p.Moves), DestCounts: map[string]int{}}}
	var nova, keel []float64
	for i, mv := range p.Moves {
		f := figs.Moves[i]
		if f == nil {
			f = &novaplan.MoveFigures{}
		}
		v.MoveFigs = append(v.MoveFigs, novaMoveFig{Instance: mv.Instance, MoveFigures: *f})
		v.Figures.Refused += f.Refused
		switch mv.State {
		case records.MoveDone:
			v.Figures.Done++
			v.Figures.DestCounts[mv.Result]++
			nova, keel = append(nova, f.NovaSeconds), append(keel, f.KeelMS)
		case records.MoveFailed:
			v.Figures.Failed++
			if strings.HasPrefix(mv.Reason, "no destination") {
				v.Figures.RefusedCapacity++
			}
		case records.MoveSkipped:
			v.Figures.Skipped++
		}
	}
	v.Figures.NovaSecondsMedian, v.Figures.KeelMSMedian = median(nova), median(keel)
	if len(nova) > 0 {
		v.Figures.NovaSecondsMax, v.Figures.KeelMSMax = slices.Max(nova), slices.Max(keel)
	}
	return v
}

func novaHeadline(v NovaPlan) string {
	s := v.Progress
	what := v.Purpose
	if len(v.Hosts) > 0 {
		what += " " + strings.Join(v.Hosts, ",")
	}
	return fmt.Sprintf("plan %d (%s): %s — %d done, %d running, %d left, %d failed, %d skipped, %d cancelled of %d",
		v.ID, what, v.State, s.Done, s.Running, s.Left, s.Failed, s.Skipped, s.Cancelled, s.Total)
}

// followNovaPlan prints a line per move as it ends until the plan ends;
// Ctrl-C leaves it running and says how to follow it.
func followNovaPlan(cmd *cobra.Command, st novaplan.Store, dir, cloud string, id int64, out io.Writer) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	seen := map[int]records.MoveState{}
	n := 0
	for {
		p, err := st.GetPlan(context.WithoutCancel(ctx), id)
		if err != nil {
			return err
		}
		figs := novaplan.LoadFigures(dir, id)
		for i, mv := range p.Moves {
			if seen[i] == mv.State {
				continue
			}
			if f := figs.Moves[i]; mv.State == records.MoveDone && (f == nil || f.Dest == "") && !records.PlanTerminal(p.State) {
				continue // its figures are written just after it: next poll
			}
			seen[i] = mv.State
			switch mv.State {
			case records.MoveRunning:
				fmt.Fprintf(out, "moving %s: %s → %s (migration %d)\n", mv.Instance, mv.Source, destOf(figs, i), mv.Migration)
			case records.MoveDone, records.MoveFailed, records.MoveSkipped, records.MoveCancelled:
				n++
				line := fmt.Sprintf("[%d/%d] %s: %s → %s %s", n, len(p.Moves), mv.Instance, mv.Source, orDefault(mv.Result, "-"), mv.State)
				if mv.Reason != "" {
					line += ": " + mv.Reason
				}
				fmt.Fprintln(out, line)
				if f := figs.Moves[i]; f != nil && mv.State == records.MoveDone {
					fmt.Fprintf(out, "move %s %s -> %s %.2fs (keel %.2f ms: decision %.2f, bookkeeping %.2f; reads before the request %.0f ms)\n",
						mv.Instance, mv.Source, mv.Result, f.NovaSeconds, f.KeelMS, f.DecisionMS, f.BookkeepingMS, f.ReadsMS)
				}
			}
		}
		if records.PlanTerminal(p.State) {
			v := novaPlanView(dir, p)
			fmt.Fprintln(out, novaHeadline(v))
			fmt.Fprintf(out, "keel drain: moves=%d done=%d refused_capacity=%d refused_by_nova=%d failed=%d skipped=%d nova_s_median=%.2f keel_ms_median=%.2f keel_ms_max=%.2f\n",
				v.Figures.Moves, v.Figures.Done, v.Figures.RefusedCapacity, v.Figures.Refused, v.Figures.Failed, v.Figures.Skipped,
				v.Figures.NovaSecondsMedian, v.Figures.KeelMSMedian, v.Figures.KeelMSMax)
			if p.State != records.PlanDone {
				return fmt.Errorf("plan %d ended %s: %s", id, p.State, p.Reason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "stopped following: plan %d goes on; follow it with: keel plan show %d --wait --os-cloud %s --data-dir %s\n", id, id, cloud, dir)
			return nil
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func destOf(f novaplan.Figures, i int) string {
	if m := f.Moves[i]; m != nil && m.Dest != "" {
		return m.Dest
	}
	return "?"
}

// novaPlanShow, novaPlanList and novaPlanCancel are keel plan show, list
// and cancel on a Nova cloud's local store.
func novaPlanShow(cmd *cobra.Command, c *client.Client, cf *clientFlags, id int64, wait bool) error {
	dir, st, err := novaStoreOf(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	if wait {
		if err := ensureExecutor(environOf(cmd.Context()), dir); err != nil {
			return err
		}
		if err := followNovaPlan(cmd, st, dir, c.Cloud(), id, cmd.OutOrStdout()); err != nil {
			return err
		}
	}
	p, err := st.GetPlan(cmd.Context(), id)
	if err != nil {
		return fmt.Errorf("plan %d is not in %s: keel plan list --os-cloud %s shows the plans: %w", id, dir, c.Cloud(), err)
	}
	v := novaPlanView(dir, p)
	out := cmd.OutOrStdout()
	if cf.json() {
		return writeJSON(out, v)
	}
	fmt.Fprintln(out, novaHeadline(v))
	t := newTable(out, "#", "INSTANCE", "RAM MiB", "FROM", "TO", "STATE", "ATTEMPTS", "NOVA s", "KEEL ms", "REASON")
	for i, mv := range p.Moves {
		f := v.MoveFigs[i]
		t.row(fmt.Sprint(i+1), mv.Instance, fmt.Sprint(mv.RAMMB), mv.Source, mv.Result, string(mv.State), fmt.Sprint(mv.Attempts),
			fmt.Sprintf("%.2f", f.NovaSeconds), fmt.Sprintf("%.2f", f.KeelMS), mv.Reason)
	}
	return t.flush()
}

func novaStoreOf(cmd *cobra.Command, c *client.Client, cf *clientFlags) (string, *sqlite.Store, error) {
	dir, err := novaDataDir(environOf(cmd.Context()), cf, c.Cloud())
	if err != nil {
		return "", nil, err
	}
	st, err := openNovaStore(cmd.Context(), dir)
	return dir, st, err
}

func novaPlanList(cmd *cobra.Command, c *client.Client, cf *clientFlags) error {
	dir, st, err := novaStoreOf(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	ps, err := st.ListPlans(cmd.Context(), false)
	if err != nil {
		return err
	}
	var vs []NovaPlan
	for _, p := range ps {
		vs = append(vs, novaPlanView(dir, p))
	}
	out := cmd.OutOrStdout()
	if cf.json() {
		return writeJSON(out, vs)
	}
	if len(vs) == 0 {
		fmt.Fprintf(out, "no plans in %s (keel host drain --os-cloud %s HOST starts one)\n", dir, c.Cloud())
	}
	for _, v := range vs {
		fmt.Fprintln(out, novaHeadline(v))
	}
	return nil
}

func novaPlanCancel(cmd *cobra.Command, c *client.Client, cf *clientFlags, id int64, abort bool) error {
	dir, st, err := novaStoreOf(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := st.GetPlan(cmd.Context(), id)
	if err != nil {
		return fmt.Errorf("plan %d is not in %s: %w", id, dir, err)
	}
	next, _, err := (plan.Machine{}).Step(p, plan.Event{Kind: plan.Cancel, Abort: abort, Now: time.Now().UTC()})
	if err != nil {
		var ill *plan.IllegalError
		if errors.As(err, &ill) {
			return fmt.Errorf("plan %d is %s: nothing to cancel", id, p.State)
		}
		return err
	}
	// The executor performs what the cancel asks (aborts) as it follows
	// the running moves.
	if next, err = st.UpdatePlan(cmd.Context(), next); err != nil {
		return err
	}
	if err := ensureExecutor(environOf(cmd.Context()), dir); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), novaHeadline(novaPlanView(dir, next)))
	return nil
}

// novaRebalancePlan is keel rebalance plan on a Nova cloud: keel's
// rebalance planner on the cloud read through Nova's API and Placement,
// under the filters of --nova-conf (Nova's defaults without it); the
// moves are stored as a recommended plan in the local store.
func novaRebalancePlan(cmd *cobra.Command, c *client.Client, cf *clientFlags, o client.RebalanceOptions) error {
	_, cfg, nc, st, err := novaSetup(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	p, rp, err := novaplan.PlanRebalance(cmd.Context(), st, &nc, novaplan.RebalanceOptions{Metric: o.Metric, Threshold: o.Threshold,
		MaxMoves: o.MaxMoves, Seed: o.Seed, Parallel: o.Parallel, Sched: cfg.SchedulerConfig()})
	if err != nil {
		return err
	}
	if cf.json() {
		return writeJSON(cmd.OutOrStdout(), map[string]any{"rebalance": rp, "plan": p})
	}
	names := serverNameMap{}
	for _, s := range nc.Servers {
		names[s.UUID] = s.Name
	}
	return printRebalancePlan(cmd.OutOrStdout(), rp, p.ID, names, " --os-cloud "+c.Cloud())
}

// novaRebalanceApply is keel rebalance apply on a Nova cloud: the plan
// approved in the local store, an executor made sure of, and with wait
// followed.
func novaRebalanceApply(cmd *cobra.Command, c *client.Client, cf *clientFlags, id int64, wait bool) error {
	dir, st, err := novaStoreOf(cmd, c, cf)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := novaplan.Approve(cmd.Context(), st, id)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, novaHeadline(novaPlanView(dir, p)))
	if err := ensureExecutor(environOf(cmd.Context()), dir); err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(out, "follow it with: keel plan show %d --wait --os-cloud %s --data-dir %s\n", p.ID, c.Cloud(), dir)
		return nil
	}
	return followNovaPlan(cmd, st, dir, c.Cloud(), p.ID, out)
}
