package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"keel/internal/clock"
	"keel/internal/conductor"
	"keel/internal/plan"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/store"
)

// The script commands for plans (drains, evacuate-all, rebalances) and
// for replicas (several keel servers over one store); RunScripts lists
// them.

// planCommand runs a plan command; ok is false when d is none.
func (s *script) planCommand(t *testing.T, d *datadriven.TestData) (out string, err error, ok bool) {
	ctx := context.Background()
	var p records.Plan
	switch d.Cmd {
	case "drain":
		req := conductor.DrainRequest{DryRun: d.HasArg("dry-run")}
		for _, a := range d.CmdArgs {
			if len(a.Vals) == 0 && a.Key != "dry-run" {
				req.Hosts = append(req.Hosts, a.Key)
			}
		}
		if d.HasArg("parallel") {
			d.ScanArgs(t, "parallel", &req.Parallel)
		}
		if p, err = s.c.Cond.Plans().Drain(ctx, req); err == nil {
			out = s.planLine(p)
			if req.DryRun {
				for _, mv := range p.Moves {
					out += fmt.Sprintf("  %s: %s→%s\n", s.byUUID()[mv.Instance], mv.Source, mv.Dest)
				}
			}
		}
	case "evacuate-all":
		if p, err = s.c.Cond.Plans().EvacuateAll(ctx, conductor.EvacuateAllRequest{Host: d.CmdArgs[0].Key}); err == nil {
			out = s.planLine(p)
		}
	case "rebalance":
		req := conductor.RebalanceRequest{Seed: 1}
		if d.HasArg("seed") {
			d.ScanArgs(t, "seed", &req.Seed)
		}
		var rp rebalance.Plan
		if p, rp, err = s.c.Cond.Plans().PlanRebalance(ctx, req); err == nil {
			out = fmt.Sprintf("%s planned, CV %.3f → %.3f (%s)\n", plan.Count(len(rp.Moves), "move", "moves"), rp.Before, rp.After, rp.Stopped)
			if p.ID != 0 {
				out = s.planLine(p) + out
			}
		}
	case "plan":
		// plan rebalance NAME=HOST …: a plan of those moves, recommended.
		p = records.Plan{Purpose: d.CmdArgs[0].Key}
		for _, a := range d.CmdArgs[1:] {
			in, gerr := s.c.Backing.GetInstance(ctx, s.uuidOf(a.Key))
			if gerr != nil {
				d.Fatalf(t, "plan: %v", gerr)
			}
			p.Moves = append(p.Moves, records.PlanMove{Instance: in.UUID, Source: in.Host, Dest: a.SingleVal(t), RAMMB: in.Flavor.RAMMB})
		}
		if p, err = s.c.Cond.Plans().CreatePlan(ctx, p); err == nil {
			out = s.planLine(p)
		}
	case "approve":
		if p, err = s.c.Cond.Plans().ApprovePlan(ctx, s.planID(t, d)); err == nil {
			out = s.planLine(p)
		}
	case "cancel":
		if p, err = s.c.Cond.Plans().CancelPlan(ctx, s.planID(t, d), d.HasArg("abort")); err == nil {
			out = s.planLine(p)
		}
	case "tick":
		var n int
		if n, err = s.c.Cond.Plans().TickPlans(ctx); err == nil {
			out = fmt.Sprintf("started %s\n", plan.Count(n, "move", "moves"))
		}
	case "run-plans":
		out, err = s.runPlans(t)
	case "disable", "enable":
		_, err = s.c.Backing.UpdateService(ctx, d.CmdArgs[0].Key, func(svc *records.Service) error {
			svc.Disabled = d.Cmd == "disable"
			return nil
		})
	case "replica":
		out = s.replica(t, d.CmdArgs[0].Key)
	case "kill":
		s.kill(t, d.CmdArgs[0].Key)
	case "route", "use":
		r := s.replicaNamed(t, d.CmdArgs[0].Key)
		s.c.Route(r.cond)
		if d.Cmd == "use" {
			s.c.Cond = r.cond
		}
	default:
		return "", nil, false
	}
	return out, err, true
}

// planLine is a plan in one line.
func (s *script) planLine(p records.Plan) string {
	if p.ID == 0 && len(p.Moves) > 0 {
		return fmt.Sprintf("dry run: %s\n", plan.Count(len(p.Moves), "move", "moves"))
	}
	what := p.Purpose
	if len(p.Hosts) > 0 {
		what += " of " + strings.Join(p.Hosts, ", ")
	}
	return fmt.Sprintf("plan %d: %s %s, %s\n", p.ID, what, p.State, plan.Count(len(p.Moves), "move", "moves"))
}

func (s *script) planID(t *testing.T, d *datadriven.TestData) int64 {
	id, err := strconv.ParseInt(d.CmdArgs[0].Key, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s N: %v", d.Cmd, err)
	}
	return id
}

// uuidOf is the UUID of the instance named name.
func (s *script) uuidOf(name string) string {
	if uuid, ok := s.names[name]; ok {
		return uuid
	}
	return "no-such-instance-" + name
}

// runPlans runs the executor and the clock, a tick then a second, until
// every plan has ended (at most 600 s), and says how long it took and the
// most moves it saw in flight at once: in all (with how many of them
// evacuations), out of one source and into one destination (a done
// evacuation, which waits only for its source to come back, is not in
// flight).
func (s *script) runPlans(t *testing.T) (string, error) {
	ctx := context.Background()
	start := s.c.Clock.Now()
	var most, evac, perSrc, perDst int
	for i := 0; ; i++ {
		if i == 600 {
			return "", errors.New("the plans did not end in 600 s")
		}
		if _, err := s.c.Cond.Plans().TickPlans(ctx); err != nil {
			return "", err
		}
		ms, err := s.c.Backing.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		n, e, src, dst := 0, 0, map[string]int{}, map[string]int{}
		for _, m := range ms {
			if m.Status == records.MigrationDone {
				continue
			}
			n++
			if m.Type == records.MigrationTypeEvac {
				e++
			}
			src[m.SourceHost]++
			dst[m.DestHost]++
			perSrc, perDst = max(perSrc, src[m.SourceHost]), max(perDst, dst[m.DestHost])
		}
		most, evac = max(most, n), max(evac, e)
		ps, err := s.c.Backing.ListPlans(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ps, func(p records.Plan) bool { return !records.PlanTerminal(p.State) }) {
			break
		}
		s.c.Advance(time.Second)
	}
	return fmt.Sprintf("plans ended after %s; at most %s at once (%s), %d out of one host, %d into one host\n",
		s.c.Clock.Now().Sub(start), plan.Count(most, "move", "moves"), plan.Count(evac, "evacuation", "evacuations"), perSrc, perDst), nil
}

// showPlans prints every plan: its state, summary and moves.
func (s *script) showPlans(t *testing.T, b *strings.Builder) {
	ps, err := s.c.Backing.ListPlans(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	names := s.byUUID()
	for _, p := range ps {
		line := strings.TrimSuffix(s.planLine(p), "\n")
		if p.Owner != "" {
			line += ", owner " + p.Owner
		}
		if p.Reason != "" {
			line += fmt.Sprintf(" (%s)", p.Reason)
		}
		sum := plan.Summarise(p, s.c.Clock.Now())
		fmt.Fprintf(b, "%s: %d done, %d failed, %d skipped, %d cancelled, %d left, %d bytes copied\n",
			line, sum.Done, sum.Failed, sum.Skipped, sum.Cancelled, sum.Left, sum.BytesCopied)
		for _, mv := range p.Moves {
			fmt.Fprintf(b, "  %s: %s→%s %s", names[mv.Instance], mv.Source, orDash(mv.Dest), mv.State)
			if mv.Result != "" {
				fmt.Fprintf(b, " on %s", mv.Result)
			}
			if mv.Attempts > 0 {
				fmt.Fprintf(b, ", %s, migration %d", plan.Count(mv.Attempts, "attempt", "attempts"), mv.Migration)
			}
			if !mv.StartedAt.IsZero() {
				fmt.Fprintf(b, ", started +%s", mv.StartedAt.Sub(clock.Epoch))
			}
			if mv.Reason != "" {
				fmt.Fprintf(b, " (%s)", mv.Reason)
			}
			b.WriteString("\n")
		}
	}
	if len(ps) == 0 {
		b.WriteString("no plans\n")
	}
}

// showServices prints each host's service: enabled or disabled (why),
// and forced down.
func (s *script) showServices(t *testing.T, b *strings.Builder) {
	for _, h := range s.c.Hosts {
		svc, err := s.c.Backing.GetService(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		state := "enabled"
		if svc.Disabled {
			state = "disabled"
			if svc.DisabledReason != "" {
				state += fmt.Sprintf(" (%s)", svc.DisabledReason)
			}
		}
		if svc.ForcedDown {
			state += ", forced down"
		}
		fmt.Fprintf(b, "%s: %s\n", h, state)
	}
}

// showMoved prints how many completed migrations each instance has.
func (s *script) showMoved(t *testing.T, b *strings.Builder) {
	ms, err := s.c.Backing.ListMigrations(context.Background(), store.MigrationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range ms {
		if m.Status == records.MigrationCompleted {
			n[m.InstanceUUID]++
		}
	}
	for _, name := range sortedKeys(s.names) {
		fmt.Fprintf(b, "%s: %d\n", name, n[s.names[name]])
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// replica is another keel server over the script's cloud.
type replica struct {
	cond *conductor.Conductor
	stop context.CancelFunc
}

// replica starts another keel server named name (Owner) over the cloud's
// store and agents, configured as the cloud's conductor is: it recovers,
// then heartbeats and sweeps until killed.
func (s *script) replica(t *testing.T, name string) string {
	o := s.c.Opts.Conductor
	o.Owner = name
	r := &replica{cond: s.c.NewConductor(o, uint64(11+2*len(s.replicas)), conductor.Hooks{})}
	n, err := r.cond.Recover(context.Background())
	if err != nil {
		t.Fatalf("replica %s recovering: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	r.stop = cancel
	r.cond.RunOwnership(ctx)
	s.replicas[name] = r
	return fmt.Sprintf("recovered %d\n", n)
}

// replicaNamed is the replica named name: the cloud's own conductor is
// the one its Owner names.
func (s *script) replicaNamed(t *testing.T, name string) *replica {
	if r, ok := s.replicas[name]; ok {
		return r
	}
	if name == s.c.Opts.Conductor.Owner {
		return &replica{cond: s.c.Cond, stop: s.stop}
	}
	t.Fatalf("no replica %q", name)
	return nil
}

// kill stops a replica's heartbeats and sweeps (it died); its memory
// stays, unused.
func (s *script) kill(t *testing.T, name string) {
	r := s.replicaNamed(t, name)
	if r.stop == nil {
		t.Fatalf("replica %s runs no heartbeats (cloud … sweeps)", name)
	}
	r.stop()
}
