package libvirt

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	"keel/internal/compute"
	"keel/internal/records"
)

// Measured usage: one virConnectGetAllDomainStats call reads every active
// domain's cpu.time and balloon.rss (QEMU's resident memory, with or
// without a balloon device), virNodeGetCPUStats the host's CPU times,
// the source of Nova's cpu.virt_driver monitor, and virNodeGetMemoryStats
// the host's memory; utilisations are the counters' change between two
// readings.

// metricSource is the Source of the metrics the libvirt driver measures.
const metricSource = "libvirt.Driver"

// MeasureWindow is the shortest time a utilisation is measured over: the
// first Measure (or one right after another) reads the counters, waits
// out the rest of the window and reads them again.
const MeasureWindow = 250 * time.Millisecond

// domainID names one run of a domain: its UUID and the ID libvirtd gave
// it when it started (a domain that restarts or arrives by migration
// gets a new one).
type domainID struct {
	uuid string
	id   int32
}

// domSample is one reading of a domain's counters.
type domSample struct {
	cpuNS uint64
	rssMB int64
}

// sample is one reading of the host and its guests.
type sample struct {
	at   time.Time
	host compute.CPUTimes
	mhz  float64
	// memTotalMB and memAvailMB are the host's memory (0, 0: unread).
	memTotalMB, memAvailMB int64
	guests                 map[domainID]domSample
}

// readSample reads the host's CPU times and every active domain of this
// host's that runs (running, or paused other than for an incoming copy).
func (d *Driver) readSample() (sample, error) {
	l, err := d.lv()
	if err != nil {
		return sample{}, err
	}
	s := sample{guests: map[domainID]domSample{}}
	_, n, err := l.NodeGetCPUStats(int32(golibvirt.NodeCPUStatsAllCpus), 0, 0)
	if err != nil {
		return sample{}, fmt.Errorf("reading the host's CPU times (virNodeGetCPUStats): %w", err)
	}
	params, _, err := l.NodeGetCPUStats(int32(golibvirt.NodeCPUStatsAllCpus), n, 0)
	if err != nil {
		return sample{}, fmt.Errorf("reading the host's CPU times (virNodeGetCPUStats): %w", err)
	}
	for _, p := range params {
		switch p.Field {
		case golibvirt.NodeCPUStatsUser:
			s.host.User = p.Value
		case golibvirt.NodeCPUStatsKernel:
			s.host.Kernel = p.Value
		case golibvirt.NodeCPUStatsIdle:
			s.host.Idle = p.Value
		case golibvirt.NodeCPUStatsIowait:
			s.host.IOWait = p.Value
		}
	}
	if _, _, _, mhz, _, _, _, _, err := l.NodeGetInfo(); err == nil && mhz > 0 {
		s.mhz = float64(mhz)
	}
	s.memTotalMB, s.memAvailMB = d.readHostMemory(l)
	recs, err := l.ConnectGetAllDomainStats(nil, uint32(golibvirt.DomainStatsState|golibvirt.DomainStatsCPUTotal|golibvirt.DomainStatsBalloon),
		uint32(golibvirt.ConnectGetAllDomainsStatsActive))
	s.at = time.Now()
	if err != nil {
		return sample{}, fmt.Errorf("reading the domains' statistics (virConnectGetAllDomainStats): %w", err)
	}
	live := map[domainID]bool{}
	for _, r := range recs {
		id := domainID{uuid: uuid.UUID(r.Dom.UUID).String(), id: r.Dom.ID}
		live[id] = true
		if !d.ownDomain(l, id, r.Dom) {
			continue
		}
		var state, reason int64
		var ds domSample
		hasCPU := false
		for _, p := range r.Params {
			v, ok := paramInt(p.Value.I)
			if !ok {
				continue
			}
			switch p.Field {
			case "state.state":
				state = v
			case "state.reason":
				reason = v
			case "cpu.time":
				ds.cpuNS, hasCPU = uint64(v), true
			case golibvirt.DomainStatsBalloonRss:
				ds.rssMB = v >> 10 // KiB
			}
		}
		paused := int32(state) == statePaused
		if !hasCPU || (int32(state) != stateRunning && !paused) ||
			(paused && reason == int64(golibvirt.DomainPausedMigration)) {
			continue
		}
		s.guests[id] = ds
	}
	d.ownersMu.Lock()
	for id := range d.owners {
		if !live[id] {
			delete(d.owners, id)
		}
	}
	d.ownersMu.Unlock()
	return s, nil
}

// readHostMemory reads the host's memory as libvirtd reads the kernel's
// /proc/meminfo (virNodeGetMemoryStats over all NUMA cells: total, free,
// buffers, cached, KiB): the total, and as available what is free or
// holds buffers and page cache the kernel can reclaim (libvirtd does not
// pass MemAvailable on). 0, 0 when it does not read: unavailable.
func (d *Driver) readHostMemory(l *golibvirt.Libvirt) (totalMB, availableMB int64) {
	cell := int32(golibvirt.NodeMemoryStatsAllCells)
	_, n, err := l.NodeGetMemoryStats(0, cell, 0)
	if err == nil && n > 0 {
		var params []golibvirt.NodeGetMemoryStats
		if params, _, err = l.NodeGetMemoryStats(n, cell, 0); err == nil {
			return hostMemory(params)
		}
	}
	if err == nil {
		err = fmt.Errorf("libvirtd gave no memory statistics")
	}
	if !d.memWarned { // sampleMu held
		d.memWarned = true
		d.log.Warn("reading the host's memory (virNodeGetMemoryStats): keel.memory.* unavailable", "err", err)
	}
	return 0, 0
}

// hostMemory sums virNodeGetMemoryStats' fields into MiB.
func hostMemory(params []golibvirt.NodeGetMemoryStats) (totalMB, availableMB int64) {
	var total, avail uint64
	for _, p := range params {
		switch p.Field {
		case golibvirt.NodeMemoryStatsTotal:
			total = p.Value
		case golibvirt.NodeMemoryStatsFree, golibvirt.NodeMemoryStatsBuffers, golibvirt.NodeMemoryStatsCached:
			avail += p.Value
		}
	}
	if total == 0 {
		return 0, 0
	}
	return int64(total >> 10), int64(min(avail, total) >> 10)
}

// ownDomain reports whether the domain is one of this host's (its keel
// metadata names this agent's host), reading the metadata once per run of
// the domain.
func (d *Driver) ownDomain(l *golibvirt.Libvirt, id domainID, ld golibvirt.Domain) bool {
	d.ownersMu.Lock()
	own, known := d.owners[id]
	d.ownersMu.Unlock()
	if known {
		return own
	}
	_, own, err := d.read(l, ld)
	if err != nil {
		d.log.Warn("reading a domain's keel metadata to measure it", "domain", ld.Name, "err", err)
		return false
	}
	d.ownersMu.Lock()
	if d.owners == nil {
		d.owners = map[domainID]bool{}
	}
	d.owners[id] = own
	d.ownersMu.Unlock()
	return own
}

func paramInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		return int64(v), true
	}
	return 0, false
}

// Measure implements compute.Measurer: the host's CPU shares, as
// libvirtd reads them, and each running guest's CPU (physical CPUs busy:
// its cpu.time over the time between two readings) and resident memory
// (balloon.rss), and the host's memory (keel.memory.*; left out when
// libvirtd does not give it). A guest that started since the last reading
// is left out until the next (unavailable, never zero).
func (d *Driver) Measure(ctx context.Context) (compute.Measurement, error) {
	d.sampleMu.Lock()
	defer d.sampleMu.Unlock()
	prev := d.lastSample
	if prev.at.IsZero() {
		s, err := d.readSample()
		if err != nil {
			return compute.Measurement{}, fmt.Errorf("measuring usage: %w", err)
		}
		prev = s
	}
	if wait := MeasureWindow - time.Since(prev.at); wait > 0 {
		select {
		case <-ctx.Done():
			return compute.Measurement{}, fmt.Errorf("measuring usage: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
	cur, err := d.readSample()
	if err != nil {
		return compute.Measurement{}, fmt.Errorf("measuring usage: %w", err)
	}
	d.lastSample = cur
	host, ok := compute.CPUMetricsBetween(cur.at, metricSource, cur.mhz, prev.host, cur.host)
	if !ok {
		return compute.Measurement{}, fmt.Errorf("libvirtd counted no CPU time in %s: %w", cur.at.Sub(prev.at), compute.ErrUnmeasured)
	}
	host = append(host, compute.MemoryMetrics(cur.at, metricSource, cur.memTotalMB, cur.memAvailMB)...)
	m := compute.Measurement{At: cur.at, Host: host}
	elapsed := cur.at.Sub(prev.at).Seconds()
	for id, g := range cur.guests {
		p, ok := prev.guests[id]
		if !ok || g.cpuNS < p.cpuNS {
			continue
		}
		busy := float64(g.cpuNS-p.cpuNS) / 1e9 / elapsed
		m.Instances = append(m.Instances, records.InstanceUsage{UUID: id.uuid, VCPUsBusy: busy, MemoryMB: g.rssMB, Timestamp: cur.at})
	}
	slices.SortFunc(m.Instances, func(a, b records.InstanceUsage) int { return strings.Compare(a.UUID, b.UUID) })
	return m, nil
}
