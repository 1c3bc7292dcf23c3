package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// FleetRestart is what restarting the server with the fleet connected
// measured (--fleet-restart): the goal is every host up again
// within service_down_time, and no thundering herd that costs more than
// one report interval of the server's CPU.
type FleetRestart struct {
	Hosts int `json:"hosts"`
	// StopS is the old server's stop (SIGINT to exit), StartS the new
	// one's (process start to its API answering and a login).
	StopS  float64 `json:"stop_s"`
	StartS float64 `json:"start_s"`
	// AllUpS is from the stop's signal until every agent's heartbeat was
	// answered again (by the new server); Answered how many were by the
	// deadline (2 × service_down_time), of Hosts.
	AllUpS   float64 `json:"all_up_s"`
	Answered int     `json:"answered"`
	// ServerCPUS is the new server's CPU from its start until every host
	// was heard from; SteadyCPUS what the server used over as long before
	// the restart (the last step's cores × that time), HerdCPUS the
	// difference: what the restart cost beyond the steady state.
	// IntervalCPUS is one report interval of the steady state's CPU (the
	// goal's bound on HerdCPUS).
	ServerCPUS float64 `json:"server_cpu_s"`
	// ServerWaitCores is how long the new server's threads waited for a
	// CPU until then, in cores (starved, not idle, when large).
	ServerWaitCores float64 `json:"server_wait_cores"`
	SteadyCPUS      float64 `json:"steady_cpu_s"`
	HerdCPUS        float64 `json:"herd_cpu_s"`
	IntervalCPUS    float64 `json:"interval_cpu_s"`
	// AfterCores is the new server's CPU over the report interval after
	// every host was heard from, in cores.
	AfterCores float64 `json:"after_cores"`
	// HostsDown is the most hosts os-hypervisors/detail showed not up
	// from the new server's start until a report interval after all were
	// heard from; HypervisorsP99MS that call's p99 meanwhile.
	HostsDown        int     `json:"hosts_down"`
	HypervisorsP99MS float64 `json:"hypervisors_p99_ms"`
	Load1            float64 `json:"load1"`
	// Met: every host heard from within service_down_time of the stop,
	// none seen down, and HerdCPUS within IntervalCPUS.
	Met bool `json:"met"`
}

// restart stops the server (SIGINT) with the fleet connected and starts
// it again on the same data dir and ports, then waits until every agent's
// heartbeat is answered again. steadyCores is the server's CPU at the last
// step, in cores.
func (g *fleetGen) restart(ctx context.Context, steadyCores float64) (FleetRestart, error) {
	rs := FleetRestart{Hosts: len(g.agents)}
	if g.backend != nil || len(g.srvs) != 1 {
		return rs, errors.New("--fleet-restart restarts one server on SQLite with its embedded NATS (not --fleet-store postgres)")
	}
	old := g.srv
	apiAddr := strings.TrimPrefix(old.url, "http://")
	busAddr := strings.TrimPrefix(old.busURL, "nats://")
	t0 := time.Now()
	old.stop()
	rs.StopS = time.Since(t0).Seconds()
	t1 := time.Now()
	p, err := startKeelOn(ctx, old.bin, filepath.Dir(old.dir), old.name, old.sets, old.extra, apiAddr, busAddr)
	if err != nil {
		return rs, fmt.Errorf("starting the server again: %w", err)
	}
	g.srv, g.srvs[0] = p, p
	rs.StartS = time.Since(t1).Seconds()

	// The API client alongside, from the new server's start until a
	// report interval after every host was heard from.
	actx, stopAPI := context.WithCancel(ctx)
	defer stopAPI()
	apiDone := make(chan apiSamples, 1)
	go func() {
		s, _ := g.callAPI(actx, len(g.agents))
		apiDone <- s
	}()
	deadline := 2 * g.plan.DownTime
	_ = waitFor(ctx, deadline, 250*time.Millisecond, func() (bool, error) {
		return g.hb.answeredSince(t0) >= len(g.agents), nil
	})
	rs.Answered = g.hb.answeredSince(t0)
	rs.AllUpS = time.Since(t0).Seconds()
	cpu, err := procCPU(p.cmd.Process.Pid)
	if err != nil {
		return rs, err
	}
	sinceStart := time.Since(t1)
	rs.ServerCPUS = cpu.Seconds()
	rs.ServerWaitCores = procRunWait(p.cmd.Process.Pid).Seconds() / sinceStart.Seconds()
	rs.SteadyCPUS = steadyCores * sinceStart.Seconds()
	rs.HerdCPUS = max(0, rs.ServerCPUS-rs.SteadyCPUS)
	rs.IntervalCPUS = steadyCores * g.plan.Report.Seconds()

	t2 := time.Now()
	select {
	case <-ctx.Done():
		return rs, ctx.Err()
	case <-time.After(g.plan.Report):
	}
	cpu2, err := procCPU(p.cmd.Process.Pid)
	if err != nil {
		return rs, err
	}
	rs.AfterCores = (cpu2 - cpu).Seconds() / time.Since(t2).Seconds()
	stopAPI()
	api := <-apiDone
	rs.HostsDown = api.down
	rs.HypervisorsP99MS = ms(percentile(api.hypervisors, 99))
	rs.Load1 = loadAverage()
	rs.Met = rs.Answered == rs.Hosts && rs.AllUpS <= g.plan.DownTime.Seconds() && rs.HostsDown == 0 && rs.HerdCPUS <= rs.IntervalCPUS
	return rs, nil
}

// fleetRestart runs the restart after the ramp and turns it into figures.
func (r *run) fleetRestart(ctx context.Context, g *fleetGen) {
	steps := r.rep.Fleet
	if len(steps) == 0 {
		return
	}
	r.progress("fleet: restarting the server with %d agents connected", len(g.agents))
	rs, err := g.restart(ctx, steps[len(steps)-1].ServerCores)
	if err != nil {
		r.progress("fleet: restart: %v", err)
		r.unmeasured("fleet_restart_all_up_s", err.Error())
		return
	}
	r.rep.FleetRestart = &rs
	r.figure("fleet_restart_all_up_s", rs.AllUpS)
	r.figure("fleet_restart_herd_cpu_s", rs.HerdCPUS)
	r.figure("fleet_restart_herd_intervals", rs.HerdCPUS/max(rs.IntervalCPUS, 1e-9))
	r.progress("fleet: restart at %d hosts: stop %.1f s, start %.1f s; %d of %d hosts heard from again %.1f s after the stop; new server %.1f s CPU by then (waiting %.2f cores for a CPU; %.1f s beyond the steady state; one report interval is %.1f s), %.2f cores the interval after; %d seen down; hypervisors p99 %.0f ms; load %.1f",
		rs.Hosts, rs.StopS, rs.StartS, rs.Answered, rs.Hosts, rs.AllUpS, rs.ServerCPUS, rs.ServerWaitCores, rs.HerdCPUS, rs.IntervalCPUS, rs.AfterCores, rs.HostsDown, rs.HypervisorsP99MS, rs.Load1)
}
