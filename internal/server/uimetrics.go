package server

import (
	"context"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/store"
)

// cloudCollector reports per-host gauges under openstack-exporter's names
// and labels (so Grafana dashboards built for OpenStack read keel
// unchanged) and keel's own gauges for moves, plans and imbalance. Each scrape
// brings the host view up to date from the change stream (no full read of
// the store) and reads only the migrations in flight. At 10,000 hosts
// that is about 350,000 samples: they are written straight in
// Prometheus' text format (metricsText), not through client_golang's
// registry, which built, hashed and sorted an object per sample (1.3 s
// and 200 MB of garbage a scrape).
type cloudCollector struct {
	u *uiHub

	rpTotal, rpReserved, rpRatio, rpUsage                         *gauge
	vcpus, vcpusUsed, memBytes, memUsedBytes, diskBytes, diskUsed *gauge
	runningVMs, agentState                                        *gauge
	moves, moveProcessed, moveRemaining, moveTotal, imbalanceCV   *gauge
	plans, planMoves, planCopied, planLeft, planETA               *gauge
	// measured: one gauge per host metric (openstack_nova_cpu_percent,
	// …; keel_hypervisor_memory_total_bytes and _available_bytes for
	// keel's memory metrics), its age, and each guest's measured CPU and
	// memory.
	measured                               map[string]*gauge
	measuredAge, serverCPU, serverMemBytes *gauge
	// gauges are all of the above, by name.
	gauges []*gauge
	// spare keeps a scrape's buffers for the next (at 10,000 hosts they
	// hold about 11 MB, which growing anew every scrape cost about as
	// much CPU as writing the samples; a sync.Pool lost them to the
	// collections the scrape's own garbage set off).
	spareMu sync.Mutex
	spare   *metricsText
}

// text is an empty metricsText for c's gauges; give it back with
// putText.
func (c *cloudCollector) text() *metricsText {
	c.spareMu.Lock()
	t := c.spare
	c.spare = nil
	c.spareMu.Unlock()
	if t == nil {
		return newMetricsText(len(c.gauges))
	}
	t.reset()
	return t
}

func (c *cloudCollector) putText(t *metricsText) {
	c.spareMu.Lock()
	c.spare = t
	c.spareMu.Unlock()
}

// measuredName is a host metric's gauge: openstack_nova_ and its Nova
// name with dots as underscores (cpu.user.percent:
// openstack_nova_cpu_user_percent; the percents are ratios 0…1,
// cpu.frequency MHz).
func measuredName(metric string) string {
	return "openstack_nova_" + strings.ReplaceAll(metric, ".", "_")
}

func newCloudCollector(u *uiHub) *cloudCollector {
	rp := []string{"hostname", "resourcetype"}
	hv := []string{"aggregates", "availability_zone", "hostname"}
	mv := []string{"id", "instance_uuid", "source", "dest", "kind"}
	d := newGauge
	measured := map[string]*gauge{}
	for _, n := range records.MetricNames {
		measured[n] = d(measuredName(n), "Measured "+n+" of the hypervisor (the agent's last report; absent while unavailable).", hv)
	}
	// openstack-exporter has no measured memory (Nova stores none): keel's
	// own names, in bytes.
	measured[records.MetricMemoryTotal] = d("keel_hypervisor_memory_total_bytes",
		"The hypervisor's memory as its kernel reports it (MemTotal; the agent's last report; absent while unavailable).", hv)
	measured[records.MetricMemoryAvailable] = d("keel_hypervisor_memory_available_bytes",
		"The hypervisor's memory available to new work as its kernel reports it (MemAvailable; the agent's last report; absent while unavailable).", hv)
	c := &cloudCollector{
		measured:       measured,
		measuredAge:    d("openstack_nova_metrics_age_seconds", "Age of the hypervisor's last measured-usage report.", hv),
		serverCPU:      d("openstack_nova_server_cpu_busy", "CPUs' worth of time a guest used (its host's last report).", []string{"hypervisor_hostname", "id"}),
		serverMemBytes: d("openstack_nova_server_memory_resident_bytes", "A guest's resident memory, bytes (its host's last report).", []string{"hypervisor_hostname", "id"}),
		u:              u,
		rpTotal:        d("openstack_placement_resource_total", "Inventory total per host and resource class (placement).", rp),
		rpReserved:     d("openstack_placement_resource_reserved", "Inventory reserved per host and resource class (placement).", rp),
		rpRatio:        d("openstack_placement_resource_allocation_ratio", "Inventory allocation ratio per host and resource class (placement).", rp),
		rpUsage:        d("openstack_placement_resource_usage", "Allocations (claims) per host and resource class (placement).", rp),
		vcpus:          d("openstack_nova_vcpus_available", "vCPUs of the hypervisor (its host record).", hv),
		vcpusUsed:      d("openstack_nova_vcpus_used", "vCPUs used on the hypervisor (its host record).", hv),
		memBytes:       d("openstack_nova_memory_available_bytes", "Memory of the hypervisor, bytes (its host record).", hv),
		memUsedBytes:   d("openstack_nova_memory_used_bytes", "Memory used on the hypervisor, bytes, reserved included (its host record).", hv),
		diskBytes:      d("openstack_nova_local_storage_available_bytes", "Local disk of the hypervisor, bytes (its host record).", hv),
		diskUsed:       d("openstack_nova_local_storage_used_bytes", "Local disk used on the hypervisor, bytes (its host record).", hv),
		runningVMs:     d("openstack_nova_running_vms", "Guests running on the hypervisor (its host record).", hv),
		agentState: d("openstack_nova_agent_state", "1 if the compute service is up (heard from within service_down_time), 0 if down.",
			[]string{"adminState", "disabledReason", "hostname", "id", "service", "zone"}),
		moves:         d("keel_moves_in_flight", "Moves (migrations) not yet in a final status, by kind.", []string{"kind"}),
		moveProcessed: d("keel_move_memory_processed_bytes", "Memory copied so far by a move in flight (the driver's last report).", mv),
		moveRemaining: d("keel_move_memory_remaining_bytes", "Memory left to copy by a move in flight (the driver's last report).", mv),
		moveTotal:     d("keel_move_memory_total_bytes", "Memory to copy by a move in flight (the driver's last report).", mv),
		imbalanceCV: d("keel_imbalance_cv", "Coefficient of variation (stddev/mean) of used/capacity over enabled hosts, by resource class.",
			[]string{"resourcetype"}),
		plans: d("keel_plans", "Move plans not ended (recommended, approved or running), by purpose and state.",
			[]string{"purpose", "state"}),
		planMoves: d("keel_plan_moves", "Moves of a plan not ended, by move state (done, running, left, failed, skipped, cancelled).",
			[]string{"plan", "purpose", "state"}),
		planCopied: d("keel_plan_memory_copied_bytes", "Memory a plan's moves have copied so far.", []string{"plan", "purpose"}),
		planLeft:   d("keel_plan_memory_remaining_bytes", "Memory a plan's running and pending moves still have to copy.", []string{"plan", "purpose"}),
		planETA: d("keel_plan_eta_seconds", "A running plan's remaining memory over its measured copy rate (absent before a rate is measured).",
			[]string{"plan", "purpose"}),
	}
	c.gauges = []*gauge{c.rpTotal, c.rpReserved, c.rpRatio, c.rpUsage, c.vcpus, c.vcpusUsed, c.memBytes,
		c.memUsedBytes, c.diskBytes, c.diskUsed, c.runningVMs, c.agentState, c.moves, c.moveProcessed, c.moveRemaining,
		c.moveTotal, c.imbalanceCV, c.plans, c.planMoves, c.planCopied, c.planLeft, c.planETA,
		c.measuredAge, c.serverCPU, c.serverMemBytes}
	for _, g := range measured {
		c.gauges = append(c.gauges, g)
	}
	slices.SortFunc(c.gauges, func(a, b *gauge) int { return strings.Compare(a.name, b.name) })
	for i, g := range c.gauges {
		g.index = i
	}
	return c
}

// collect gives every sample to g: the hosts' (the view brought up to
// date), the moves in flight and the plans not ended.
func (c *cloudCollector) collect(ctx context.Context, g sampleFunc) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.u.view.refresh(ctx); err != nil {
		c.u.log.Warn("metrics: refreshing the host view", "err", err)
		return
	}
	now := c.u.now()
	hosts := c.u.view.hosts()
	var enabled []viewHost
	const mib, gib = 1 << 20, 1 << 30
	for _, h := range hosts {
		for rc, inv := range h.Provider.Inventories {
			g(c.rpTotal, float64(inv.Total), h.Name, string(rc))
			g(c.rpReserved, float64(inv.Reserved), h.Name, string(rc))
			g(c.rpRatio, inv.AllocationRatio, h.Name, string(rc))
			g(c.rpUsage, float64(h.Provider.Usage[rc]), h.Name, string(rc))
		}
		hv := []string{aggregatesLabel(h), h.Zone, h.Name}
		if h.HasRecord {
			r := h.Record
			g(c.vcpus, float64(r.VCPUs), hv...)
			g(c.vcpusUsed, float64(r.VCPUsUsed), hv...)
			g(c.memBytes, float64(r.MemoryMB)*mib, hv...)
			g(c.memUsedBytes, float64(r.MemoryMBUsed)*mib, hv...)
			g(c.diskBytes, float64(r.LocalGB)*gib, hv...)
			g(c.diskUsed, float64(r.LocalGBUsed)*gib, hv...)
			g(c.runningVMs, float64(r.RunningVMs), hv...)
			c.collectMeasured(g, r, hv, now)
		}
		if h.HasService {
			state := "enabled"
			if h.Service.Disabled {
				state = "disabled"
			} else {
				enabled = append(enabled, h)
			}
			v := 0.0
			if up(h, now, c.u.downTime) {
				v = 1
			}
			g(c.agentState, v, state, h.Service.DisabledReason, h.Name, strconv.FormatInt(int64(intHostID(h.Name)), 10), "nova-compute", h.Zone)
		}
	}
	for rc, v := range imbalance(enabled) {
		g(c.imbalanceCV, v, string(rc))
	}
	migs, err := c.u.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		c.u.log.Warn("metrics: listing migrations in flight", "err", err)
		return
	}
	kinds := map[string]int{"live-migration": 0}
	for _, m := range migs {
		kinds[m.Type]++
		l := []string{strconv.FormatInt(m.ID, 10), m.InstanceUUID, m.SourceHost, m.DestHost, m.Type}
		g(c.moveProcessed, float64(m.MemoryProcessedBytes), l...)
		g(c.moveRemaining, float64(m.MemoryRemainingBytes), l...)
		g(c.moveTotal, float64(m.MemoryTotalBytes), l...)
	}
	for k, n := range kinds {
		g(c.moves, float64(n), k)
	}
	plans, err := c.u.st.ListPlans(ctx, true)
	if err != nil {
		c.u.log.Warn("metrics: listing plans", "err", err)
		return
	}
	counts := map[[2]string]int{}
	for _, purpose := range []string{records.PlanEvacuateAll, records.PlanDrain, records.PlanRebalance} {
		counts[[2]string{purpose, string(records.PlanRunning)}] = 0
	}
	for _, p := range plans {
		counts[[2]string{p.Purpose, string(p.State)}]++
		s := plan.Summarise(p, now)
		id := strconv.FormatInt(p.ID, 10)
		for state, n := range map[string]int{"done": s.Done, "running": s.Running, "left": s.Left, "failed": s.Failed,
			"skipped": s.Skipped, "cancelled": s.Cancelled} {
			g(c.planMoves, float64(n), id, p.Purpose, state)
		}
		g(c.planCopied, float64(s.BytesCopied), id, p.Purpose)
		g(c.planLeft, float64(s.BytesLeft), id, p.Purpose)
		if s.ETA > 0 {
			g(c.planETA, s.ETA.Seconds(), id, p.Purpose)
		}
	}
	for k, n := range counts {
		g(c.plans, float64(n), k[0], k[1])
	}
}

// collectMeasured reports a host record's measured usage.
func (c *cloudCollector) collectMeasured(g sampleFunc, r records.HostRecord, hv []string, now time.Time) {
	var newest time.Time
	for _, m := range r.Metrics {
		if d := c.measured[m.Name]; d != nil {
			v := m.Value
			if m.Name == records.MetricMemoryTotal || m.Name == records.MetricMemoryAvailable {
				v *= 1 << 20 // MiB
			}
			g(d, v, hv...)
			if m.Timestamp.After(newest) {
				newest = m.Timestamp
			}
		}
	}
	if !newest.IsZero() {
		g(c.measuredAge, now.Sub(newest).Seconds(), hv...)
	}
	for _, u := range r.InstanceUsage {
		g(c.serverCPU, u.VCPUsBusy, r.Host, u.UUID)
		g(c.serverMemBytes, float64(u.MemoryMB)*(1<<20), r.Host, u.UUID)
	}
}

// intHostID is a host's stable integer id (the compute API's id before
// microversion 2.53, which os-services shows).
func intHostID(host string) uint32 { return crc32.ChecksumIEEE([]byte(host)) & 0x7fffffff }
