package fake

import (
	"context"
	"fmt"
	"sort"

	"keel/internal/compute"
	"keel/internal/compute/workload"
	"keel/internal/records"
)

// metricSource is the Source of the metrics the fake driver measures.
const metricSource = "fake.Driver"

// modelOf returns a guest's workload model: its instance's metadata line,
// else its flavor's extra spec, else the driver's default; ok false when
// none is set. A model the flavor cannot have is an error.
func (d *Driver) modelOf(meta string, f records.Flavor) (*workload.Model, error) {
	line, ok := workload.For(map[string]string{workload.Key: meta}, f.ExtraSpecs, d.cfg.Workload)
	if !ok {
		return nil, nil
	}
	m, err := workload.Parse(line)
	if err == nil {
		err = m.Check(f.VCPUs, f.RAMMB)
	}
	if err != nil {
		return nil, fmt.Errorf("workload %q of flavor %s: %w", line, f.Name, err)
	}
	return &m, nil
}

// Measure implements compute.Measurer: every guest's demand under its
// workload model at the clock's time, and the host's CPU as Nova's
// cpu.virt_driver monitor reports it (fractions of the host's CPUs; the
// fake host spends a fifth of its busy time in the kernel and never waits
// for I/O), and the host's memory as its kernel would report it: what
// is not touched by the guests' models is available (the fake host itself
// uses none). A driver without HostCPUs measures nothing: unavailable;
// one without HostMemoryMB or MemoryMB leaves the memory out.
func (d *Driver) Measure(_ context.Context) (compute.Measurement, error) {
	now := d.cfg.Clock.Now()
	if d.cfg.HostCPUs <= 0 {
		return compute.Measurement{}, compute.ErrUnmeasured
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m := compute.Measurement{At: now}
	busy, touched := 0.0, int64(0)
	for _, g := range d.guests {
		var cpu float64
		var mem int64
		switch g.State {
		case compute.GuestRunning, compute.GuestMigrating:
			model, err := d.modelOf(g.Workload, g.Flavor)
			if err != nil {
				d.cfg.Log.Warn("guest's workload model refused: measured idle", "instance", g.UUID, "err", err)
			} else if model != nil {
				cpu, mem = model.Demand(d.cfg.WorkloadSeed, g.UUID, g.Flavor.VCPUs, g.Flavor.RAMMB, now)
			}
		case compute.GuestPaused:
			if model, err := d.modelOf(g.Workload, g.Flavor); err == nil && model != nil {
				_, mem = model.Demand(d.cfg.WorkloadSeed, g.UUID, g.Flavor.VCPUs, g.Flavor.RAMMB, now)
			}
		default:
			continue
		}
		busy += cpu
		touched += mem
		m.Instances = append(m.Instances, records.InstanceUsage{UUID: g.UUID, VCPUsBusy: cpu, MemoryMB: mem, Timestamp: now})
	}
	sort.Slice(m.Instances, func(i, j int) bool { return m.Instances[i].UUID < m.Instances[j].UUID })
	frac := min(busy/float64(d.cfg.HostCPUs), 1)
	freq := d.cfg.FrequencyMHz
	if freq <= 0 {
		freq = 2400
	}
	m.Host = compute.CPUMetrics(now, metricSource, freq, frac*0.8, frac*0.2, 1-frac, 0)
	total := d.cfg.HostMemoryMB
	if total <= 0 {
		total = d.cfg.MemoryMB
	}
	m.Host = append(m.Host, compute.MemoryMetrics(now, metricSource, total, total-touched)...)
	return m, nil
}
