package sim

import (
	"context"
	"math"
	"time"

	"keel/internal/records"
	"keel/internal/sim/scenario"
)

// heartbeats are the simulated agents' reports on the virtual clock. An
// agent reports every report_interval from t=0 (its registration at t=0
// is its first report), so at time t a live host was last heard from at
// ⌊t / report_interval⌋ × report_interval.
//
// Writing every host's every report would cost a store write per host
// every report_interval (86 million a day at 10,000 hosts) for nothing the
// scheduler can tell apart: ComputeFilter only asks whether the last
// report is at most service_down_time old. So a live host's report is
// written every W = report_interval × max(1, ⌊service_down_time ÷
// report_interval⌋) seconds (a multiple of the interval, never more than
// service_down_time when that is at least the interval): every decision
// finds a live host up exactly when it would with every report written,
// and a host whose heartbeats stop has its true last report written at
// once, so it goes down service_down_time after that report, as in the
// services. With service_down_time 0 nothing reads the reports and none
// is written.
type heartbeats struct {
	w        *world
	interval float64 // report_interval, seconds
	every    float64 // W, seconds; 0: not written
	stopped  map[string]bool
}

func (w *world) scheduleHeartbeats(ctx context.Context) {
	interval := scenario.DefaultReportInterval
	if v := w.sc.Compute.ReportInterval; v != nil && *v > 0 {
		interval = *v
	}
	down := scenario.DefaultServiceDownTime
	if v := w.sc.Scheduler.ServiceDownTime; v != nil {
		down = *v
	}
	hb := &heartbeats{w: w, interval: interval, stopped: map[string]bool{}}
	w.beats = hb
	if down <= 0 {
		return
	}
	hb.every = interval * max(1, math.Floor(down/interval))
	var tick func()
	tick = func() {
		now := w.clock.Now()
		for _, h := range w.hosts {
			if !hb.stopped[h.Name] {
				hb.write(ctx, h.Name, now)
			}
		}
		w.clock.AfterFunc(secs(hb.every), tick)
	}
	w.clock.AfterFunc(secs(hb.every), tick)
}

// last is a live host's last report at or before now.
func (hb *heartbeats) last(now time.Time) time.Time {
	t := now.Sub(clockEpoch).Seconds()
	return clockEpoch.Add(secs(math.Floor(t/hb.interval) * hb.interval))
}

func (hb *heartbeats) write(ctx context.Context, host string, at time.Time) {
	_, _ = hb.w.store.UpdateService(ctx, host, func(s *records.Service) error {
		if at.After(s.LastSeenUp) {
			s.LastSeenUp = at
		}
		s.UpdatedAt = at
		return nil
	})
}

// stop ends a host's reports: its last one is written now.
func (hb *heartbeats) stop(ctx context.Context, host string) {
	if hb.stopped[host] {
		return
	}
	hb.stopped[host] = true
	if hb.every > 0 {
		hb.write(ctx, host, hb.last(hb.w.clock.Now()))
	}
}

// start resumes a host's reports: it reports at once, as a restarted
// agent registering does, then with the others.
func (hb *heartbeats) start(ctx context.Context, host string) {
	if !hb.stopped[host] {
		return
	}
	delete(hb.stopped, host)
	if hb.every > 0 {
		hb.write(ctx, host, hb.w.clock.Now())
	}
}
