package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/novaplan"
	"keel/internal/plan"
	"keel/internal/records"
)

// planPoll is how often --wait reads a plan.
const planPoll = 500 * time.Millisecond

func hostDrainCommand() *cobra.Command {
	var (
		cf   *clientFlags
		o    client.DrainOptions
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "drain HOST...",
		Short: "Empty hosts for maintenance: disable them and live-migrate every instance away",
		Long: `drain creates a drain plan (POST /keel/v1/plans, admin) for the hosts and
starts it. First it checks that the other enabled hosts can hold every
instance, placing them in order on a copy of the scheduler's view; if they
cannot, it refuses before anything moves, naming the shortfall per resource
(VCPU, MEMORY_MB, DISK_GB) and the instances that fit nowhere. Then it
disables the hosts' compute services (the reason names the plan) and the
executor live-migrates every instance, the scheduler choosing each
destination as the move starts — never another draining host — under the
caps: max_concurrent_live_migrations per source, [keel]
max_concurrent_incoming_live_migrations per destination,
max_concurrent_live_migrations_total in all, and --parallel for this plan.

A failed move is retried once (the scheduler choosing again), then, with
--cold-fallback, cold-migrated; otherwise it is reported and the plan goes on
(--stop-on-failure stops starting moves instead). The plan is stored: a
restarted server resumes it without moving anything twice.

--dry-run prints the destination the scheduler would choose now for every
instance, computed on a copy of the view: nothing is claimed, stored or
disabled. --wait prints a line per move as it ends, then the plan's result.

The hosts stay disabled after the drain; ` + "`keel host undrain HOST`" + ` enables them.` + clientLong,
		Example: `  keel host drain h01 h02 --parallel 8 --wait
  keel host drain h01 --dry-run
  keel host drain h03 --order smallest --cold-fallback`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				if o.DryRun || o.ColdFallback || o.StopOnFailure {
					return fmt.Errorf("--dry-run, --cold-fallback and --stop-on-failure are for keel's own cloud; cloud %s is Nova", c.Cloud())
				}
				return novaDrain(cmd, c, cf, novaplan.DrainOptions{Hosts: args, Parallel: o.Parallel, Order: o.Order}, wait)
			}
			o.Hosts = args
			p, err := c.Drain(cmd.Context(), o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() && !wait {
				return writeJSON(out, p)
			}
			names := serverNames(cmd.Context(), c)
			if o.DryRun {
				fmt.Fprintf(out, "dry run: draining %s would move %s (computed on a copy of the view; nothing claimed)\n",
					strings.Join(args, ", "), count(len(p.Moves), "instance", "instances"))
				t := newTable(out, "#", "INSTANCE", "RAM MiB", "FROM", "TO")
				for i, mv := range p.Moves {
					t.row(strconv.Itoa(i+1), names.of(mv.Instance), strconv.FormatInt(mv.RAMMB, 10), mv.Source, mv.Dest)
				}
				return t.flush()
			}
			fmt.Fprintf(out, "plan %d: draining %s: %s (%s, order %s); services disabled (keel drain plan %d)\n",
				p.ID, strings.Join(p.Hosts, ", "), count(len(p.Moves), "move", "moves"), paceText(p.Pace, p.Options.Parallel), orDefault(p.Options.Order, "largest"), p.ID)
			if !wait {
				return nil
			}
			final, err := waitPlan(cmd.Context(), c, p.ID, out, names)
			if err != nil {
				return err
			}
			if cf.json() {
				return writeJSON(out, final)
			}
			return planOutcome(final)
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, true)
	f := cmd.Flags()
	f.IntVar(&o.Parallel, "parallel", 0, "moves of this plan in flight at once (0: only the caps limit it)")
	f.StringVar(&o.Order, "order", "largest", "move order: largest (most RAM first), smallest or given")
	f.BoolVar(&o.DryRun, "dry-run", false, "print the destinations the scheduler would choose now; change nothing")
	f.BoolVar(&o.ColdFallback, "cold-fallback", false, "cold-migrate an instance whose live migration failed")
	f.BoolVar(&o.StopOnFailure, "stop-on-failure", false, "start no more moves after one failed")
	f.BoolVar(&wait, "wait", false, "print a line per move as it ends, until the plan ends")
	return cmd
}

func hostUndrainCommand() *cobra.Command {
	var (
		cf         *clientFlags
		back, wait bool
	)
	cmd := &cobra.Command{
		Use:   "undrain HOST",
		Short: "Enable a drained host again; with --return, move its instances back",
		Long: `undrain enables HOST's compute service again (POST
/keel/v1/hosts/HOST/undrain, admin). With --return it also starts a plan
that moves back the instances HOST's last drain moved away (those still on
the host the drain put them on), each re-checked against the scheduler's
filters as it starts. It refuses while a drain of HOST still runs (cancel it
with keel plan cancel).` + clientLong,
		Example: `  keel host undrain h01
  keel host undrain h01 --return --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			p, err := c.Undrain(cmd.Context(), args[0], back)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s enabled\n", args[0])
			if p.ID == 0 {
				return nil
			}
			fmt.Fprintf(out, "plan %d: returning %s to %s\n", p.ID, count(len(p.Moves), "instance", "instances"), args[0])
			if !wait {
				return nil
			}
			final, err := waitPlan(cmd.Context(), c, p.ID, out, serverNames(cmd.Context(), c))
			if err != nil {
				return err
			}
			return planOutcome(final)
		},
	}
	cf = addClientFlags(cmd)
	cmd.Flags().BoolVar(&back, "return", false, "move the instances the last drain moved away back to the host")
	cmd.Flags().BoolVar(&wait, "wait", false, "with --return, wait until the return plan ends")
	return cmd
}

func planCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Move plans: drains, rebalances and returns, with their moves and progress",
	}
	cmd.AddCommand(planListCommand(), planShowCommand(), planCancelCommand(), planApproveCommand())
	return cmd
}

func planListCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List move plans with their state and progress",
		Long: `list shows one row per plan (GET /keel/v1/plans, admin): its purpose,
state, hosts, moves done/running/left/failed, and the owner replica.` + clientLong,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				return novaPlanList(cmd, c, cf)
			}
			ps, err := c.Plans(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, ps)
			}
			if len(ps) == 0 {
				fmt.Fprintln(out, "no plans (keel host drain HOST starts one)")
				return nil
			}
			t := newTable(out, "ID", "PURPOSE", "STATE", "HOSTS", "DONE", "RUNNING", "LEFT", "FAILED", "SKIPPED", "OWNER", "CREATED")
			for _, p := range ps {
				s := p.Progress
				t.row(strconv.FormatInt(p.ID, 10), p.Purpose, string(p.State), strings.Join(p.Hosts, ","), strconv.Itoa(s.Done), strconv.Itoa(s.Running),
					strconv.Itoa(s.Left), strconv.Itoa(s.Failed), strconv.Itoa(s.Skipped), p.Owner, stamp(p.CreatedAt))
			}
			return t.flush()
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, false)
	return cmd
}

func planShowCommand() *cobra.Command {
	var (
		cf   *clientFlags
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "show PLAN",
		Short: "Show a plan's moves, their states and results, and its progress; --wait follows it",
		Long: `show prints a plan (GET /keel/v1/plans/PLAN, admin): its state, progress
(moves done, running and left, bytes copied, the measured copy rate and the
ETA it gives), and one row per move with its state, migration, destination
(a running move's: its migration's) and reason.

--wait then follows the plan until it ends: a line per move as it ends and,
every few seconds, a line per running copy. The plan is the server's: it
goes on whether anyone follows it. A server that restarts meanwhile is
retried (the wait says so) and followed again once back; Ctrl-C stops the
following, not the plan.

On a Nova cloud (--os-cloud of a cloud that is not keel) the plans are
keel's local ones (--data-dir); --format json adds each move's figures
(nova_seconds: its wall time through Nova's API; keel_ms: keel's own time
for it) and their medians.` + clientLong,
		Example: `  keel plan show 3
  keel plan show 3 --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := connectPlan(cmd, cf, args[0])
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				return novaPlanShow(cmd, c, cf, id, wait)
			}
			p, err := c.GetPlan(cmd.Context(), id)
			switch {
			case err != nil && wait && client.IsUnreachable(err):
				// The server went away since the login: waitPlan retries.
			case err != nil:
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() && !wait {
				return writeJSON(out, p)
			}
			names := serverNames(cmd.Context(), c)
			if !cf.json() && err == nil {
				if err := printPlan(cmd.Context(), c, out, p, names); err != nil {
					return err
				}
			}
			if !wait || (err == nil && records.PlanTerminal(p.State)) {
				return nil
			}
			final, err := waitPlan(cmd.Context(), c, id, out, names)
			if err != nil {
				return err
			}
			if cf.json() {
				return writeJSON(out, final)
			}
			return planOutcome(final)
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, false)
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the plan until it ends (a line per move as it ends, per running copy every few seconds)")
	return cmd
}

// printPlan prints a plan's headline, reason and moves.
func printPlan(ctx context.Context, c *client.Client, out io.Writer, p client.Plan, names serverNameMap) error {
	fmt.Fprintln(out, planHeadline(p))
	printPace(out, p)
	if p.Reason != "" {
		fmt.Fprintf(out, "reason: %s\n", p.Reason)
	}
	var dests map[int64]string // a running move's destination, from its migration
	t := newTable(out, "#", "INSTANCE", "RAM MiB", "FROM", "TO", "STATE", "MIGRATION", "ATTEMPTS", "REASON")
	for i, mv := range p.Moves {
		to := mv.Result
		if to == "" {
			to = mv.Dest
		}
		if to == "" && mv.State == records.MoveRunning && mv.Migration != 0 {
			if dests == nil {
				dests = runningDests(ctx, c)
			}
			to = dests[mv.Migration]
		}
		mig := ""
		if mv.Migration != 0 {
			mig = strconv.FormatInt(mv.Migration, 10)
		}
		if mv.Cold {
			mig += " (cold)"
		}
		t.row(strconv.Itoa(i+1), names.of(mv.Instance), strconv.FormatInt(mv.RAMMB, 10), mv.Source, to, string(mv.State), mig,
			strconv.Itoa(mv.Attempts), mv.Reason)
	}
	return t.flush()
}

// runningDests maps each unfinished migration to its destination (best
// effort: empty if the list fails).
func runningDests(ctx context.Context, c *client.Client) map[int64]string {
	out := map[int64]string{}
	ms, err := c.Migrations(ctx, client.MigrationFilter{})
	if err != nil {
		return out
	}
	for _, m := range ms {
		if !client.Terminal(m.Status) {
			out[m.ID] = m.Dest
		}
	}
	return out
}

func planCancelCommand() *cobra.Command {
	var (
		cf    *clientFlags
		abort bool
	)
	cmd := &cobra.Command{
		Use:   "cancel PLAN",
		Short: "Cancel a plan: no more moves start; running ones finish, or abort with --abort",
		Long: `cancel stops a plan (POST /keel/v1/plans/PLAN/cancel, admin): its pending
moves are cancelled at once; its running moves finish, or with --abort their
migrations are aborted and rolled back. The plan ends cancelled when the
last running move ends. A drain's hosts stay disabled (keel host undrain).` + clientLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := connectPlan(cmd, cf, args[0])
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				return novaPlanCancel(cmd, c, cf, id, abort)
			}
			p, err := c.CancelPlan(cmd.Context(), id, abort)
			if err != nil {
				return err
			}
			if cf.json() {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			fmt.Fprintln(cmd.OutOrStdout(), planHeadline(p))
			printPace(cmd.OutOrStdout(), p)
			return nil
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, false)
	cmd.Flags().BoolVar(&abort, "abort", false, "abort the running moves too")
	return cmd
}

func planApproveCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "approve PLAN",
		Short: "Approve a recommended plan: the executor starts it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := connectPlan(cmd, cf, args[0])
			if err != nil {
				return err
			}
			p, err := c.ApprovePlan(cmd.Context(), id)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), planHeadline(p))
			printPace(cmd.OutOrStdout(), p)
			return nil
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}

// connectPlan reads a command's PLAN argument and connects: the start of
// every command that acts on one plan.
func connectPlan(cmd *cobra.Command, cf *clientFlags, arg string) (*client.Client, int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return nil, 0, fmt.Errorf("a plan id is a positive integer (keel plan list shows them), not %q", arg)
	}
	c, err := cf.connect(cmd)
	return c, id, err
}

// planHeadline is a plan's one-line summary.
func planHeadline(p client.Plan) string {
	s := p.Progress
	what := p.Purpose
	if len(p.Hosts) > 0 {
		what += " " + strings.Join(p.Hosts, ",")
	}
	line := fmt.Sprintf("plan %d (%s): %s — %d done, %d running, %d left, %d failed, %d skipped, %d cancelled of %d; %s copied",
		p.ID, what, p.State, s.Done, s.Running, s.Left, s.Failed, s.Skipped, s.Cancelled, s.Total, bytesText(s.BytesCopied))
	if s.RateBytesPerSec > 0 {
		line += fmt.Sprintf(" at %s/s", bytesText(int64(s.RateBytesPerSec)))
	}
	if s.ETA > 0 && !records.PlanTerminal(p.State) {
		line += fmt.Sprintf(", ETA %s", s.ETA.Round(time.Second))
	}
	if !p.FinishedAt.IsZero() && !p.StartedAt.IsZero() {
		line += fmt.Sprintf(", took %s", p.FinishedAt.Sub(p.StartedAt).Round(100*time.Millisecond))
	}
	return line
}

func bytesText(b int64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// planRetry is how often a wait whose server is away tries again, and
// planProgress how often it prints a line per running copy.
const (
	planRetry    = 2 * time.Second
	planProgress = 2 * time.Second
)

// waitPlan prints a line per move as it ends, and every planProgress a
// line per running copy, until the plan ends, and returns the final plan.
// A server that is away (restarting) is retried every planRetry, saying
// so; the plan goes on on the server either way, and a wait stopped
// (Ctrl-C) says how to follow it again.
func waitPlan(ctx context.Context, c *client.Client, id int64, out io.Writer, names serverNameMap) (client.Plan, error) {
	seen := map[int]bool{}
	ended := 0
	away := false
	var lastProgress time.Time
	for {
		p, err := c.GetPlan(ctx, id)
		switch {
		case ctx.Err() != nil:
			return p, stoppedFollowing(id, ctx.Err())
		case err != nil && client.IsUnreachable(err):
			if !away {
				fmt.Fprintf(out, "lost the server (%v); retrying every %s: the plan goes on there (Ctrl-C stops following it, not the plan)\n", err, planRetry)
			}
			away = true
			if err := sleepCtx(ctx, planRetry); err != nil {
				return p, stoppedFollowing(id, err)
			}
			continue
		case err != nil:
			return p, err
		case away:
			fmt.Fprintf(out, "the server is back; following plan %d again\n", id)
			away = false
		}
		for i, mv := range p.Moves {
			if seen[i] || !records.MoveTerminal(mv.State) {
				continue
			}
			seen[i] = true
			ended++
			fmt.Fprintln(out, moveLine(ended, len(p.Moves), mv, names))
		}
		if records.PlanTerminal(p.State) {
			fmt.Fprintln(out, planHeadline(p))
			return p, nil
		}
		if time.Since(lastProgress) >= planProgress {
			lastProgress = time.Now()
			printCopies(ctx, c, out, p, names)
		}
		if err := sleepCtx(ctx, planPoll); err != nil {
			return p, stoppedFollowing(id, err)
		}
	}
}

// moveLine is a move's line as it ends: "[3/8] vm9 (6e0c…) h01 → h02: done
// (8192 MiB copied in 4.2s)".
func moveLine(n, of int, mv records.PlanMove, names serverNameMap) string {
	line := fmt.Sprintf("[%d/%d] %s %s → %s: %s", n, of, names.of(mv.Instance), mv.Source, orDefault(mv.Result, "-"), mv.State)
	if mv.State == records.MoveDone && !mv.StartedAt.IsZero() {
		took := mv.EndedAt.Sub(mv.StartedAt).Round(100 * time.Millisecond)
		if mv.BytesCopied > 0 {
			line += fmt.Sprintf(" (%s copied in %s)", bytesText(mv.BytesCopied), took)
		} else {
			line += fmt.Sprintf(" (%d MiB instance, in %s; no memory copied)", mv.RAMMB, took)
		}
	}
	if mv.Cold {
		line += " (cold)"
	}
	if mv.Reason != "" && mv.State != records.MoveDone {
		line += ": " + mv.Reason
	}
	return line
}

// printCopies prints a line per running move of p: its route and, from
// its migration record, how much of its memory the copy has processed.
func printCopies(ctx context.Context, c *client.Client, out io.Writer, p client.Plan, names serverNameMap) {
	var running []records.PlanMove
	for _, mv := range p.Moves {
		if mv.State == records.MoveRunning {
			running = append(running, mv)
		}
	}
	if len(running) == 0 {
		return
	}
	migs := map[int64]client.Migration{}
	if ms, err := c.Migrations(ctx, client.MigrationFilter{Status: client.MigrationRunning}); err == nil {
		for _, m := range ms {
			migs[m.ID] = m
		}
	}
	for _, mv := range running {
		m, ok := migs[mv.Migration]
		dest := orDefault(mv.Dest, "?")
		if ok && m.Dest != "" {
			dest = m.Dest
		}
		line := fmt.Sprintf("  copying %s %s → %s", names.of(mv.Instance), mv.Source, dest)
		if ok && m.MemoryTotalBytes > 0 {
			line += fmt.Sprintf(": memory %d%% of %s", m.MemoryPercent(), mib(m.MemoryTotalBytes))
		}
		if !mv.StartedAt.IsZero() {
			line += fmt.Sprintf(" (%s so far)", time.Since(mv.StartedAt).Round(time.Second))
		}
		fmt.Fprintln(out, line)
	}
}

// stoppedFollowing is a wait's error once its context ended: the plan is
// the server's and goes on.
func stoppedFollowing(id int64, err error) error {
	return fmt.Errorf("stopped following plan %d (%v); the plan goes on: keel plan show %d --wait follows it again", id, err, id)
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// planOutcome is the command's error for a plan that did not end done.
func planOutcome(p client.Plan) error {
	if p.State == records.PlanDone {
		return nil
	}
	return errors.New("plan " + strconv.FormatInt(p.ID, 10) + " ended " + string(p.State) + ": " + orDefault(p.Reason, "see keel plan show "+strconv.FormatInt(p.ID, 10)))
}

// serverNameMap names instances by UUID for the tables.
type serverNameMap map[string]string

func (m serverNameMap) of(uuid string) string {
	if n := m[uuid]; n != "" {
		return n + " (" + uuid[:min(8, len(uuid))] + ")"
	}
	return uuid
}

// serverNames reads every server's name; nil (UUIDs alone) if the list
// fails.
func serverNames(ctx context.Context, c *client.Client) serverNameMap {
	ss, err := c.Servers(ctx, true)
	if err != nil {
		return nil
	}
	m := serverNameMap{}
	for _, s := range ss {
		m[s.ID] = s.Name
	}
	return m
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// paceText says how a plan's moves go: how many at once, the limit that
// binds, and how long they are expected to take; "parallel N" alone from
// a server that does not say.
func paceText(pc *plan.Pace, parallel int) string {
	if pc == nil {
		if parallel <= 0 {
			return "parallel unlimited"
		}
		return "parallel " + strconv.Itoa(parallel)
	}
	s := fmt.Sprintf("%d at once: %s", pc.AtOnce, pc.BoundBy)
	switch {
	case pc.Expected >= time.Second:
		s += "; expected " + pc.Expected.Round(time.Second).String()
	case pc.Expected > 0:
		s += "; expected under 1s"
	}
	return s
}

// printPace prints a plan's pace line while it has moves left.
func printPace(out io.Writer, p client.Plan) {
	if p.Pace != nil && p.Progress.Left+p.Progress.Running > 0 {
		fmt.Fprintf(out, "pace: %s\n", paceText(p.Pace, p.Options.Parallel))
	}
}

// count is n and the noun for n: "1 move", "2 moves".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
