package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// measure writes a host's record with cpu.percent (a fraction) measured
// now, and the instances it measured (uuid → CPUs busy).
func (c *cloud) measure(t *testing.T, host string, cpu float64, at time.Time, insts map[string]float64) {
	t.Helper()
	rec := records.HostRecord{Host: host, ProviderUUID: "rp-" + host,
		Metrics: []records.Metric{
			{Name: records.MetricCPUPercent, Value: cpu, Timestamp: at, Source: "test"},
			{Name: records.MetricCPUIdlePercent, Value: 1 - cpu, Timestamp: at, Source: "test"},
		}}
	for u, busy := range insts {
		rec.InstanceUsage = append(rec.InstanceUsage, records.InstanceUsage{UUID: u, VCPUsBusy: busy, Timestamp: at})
	}
	if err := c.st.PutHostRecord(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

func metricsConfig() Config {
	cfg := DefaultConfig()
	cfg.Weighers = []string{"MetricsWeigher"}
	cfg.Metrics.WeightSetting = []MetricWeight{{Name: records.MetricCPUPercent, Ratio: -1}}
	return cfg
}

// TestClaimAdjustsMeasuredLoad is keel's fix for MetricsWeigher's
// staleness: under the claim policy, consecutive boots see each other's
// expected load at once, so they spread by measured CPU; under legacy
// (Nova) every boot goes to the host that measured idlest.
func TestClaimAdjustsMeasuredLoad(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   string
	}{
		{PolicyLegacy, "h01 h01 h01 h01"},
		{PolicyClaim, "h01 h02 h01 h03"}, // 22.5 % vs 20 %, then 32.5 vs 22.5 vs 30, …
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			c := newCloud(t, 3)
			now := c.clk.Now()
			// 32 CPUs each: 10 %, 20 %, 30 % busy.
			c.measure(t, "h01", 0.10, now, nil)
			c.measure(t, "h02", 0.20, now, nil)
			c.measure(t, "h03", 0.30, now, nil)
			s := c.scheduler(t, metricsConfig(), tc.policy, 1)
			var got []string
			for i := range 4 {
				// 4 vCPUs a boot, all busy by its flavor: 12.5 points.
				r := placement.Resources{placement.VCPU: 4, placement.MemoryMB: 1024, placement.DiskGB: 10}
				uuid := "vm" + string(rune('a'+i))
				sel, err := s.Select(context.Background(), &Request{InstanceUUID: uuid, Resources: r}, storeClaim(c.st, uuid, r))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, sel.Host)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("boots went to %v, want %s", got, tc.want)
			}
		})
	}
}

// TestAssumedLoadEndsWithTheMeasurementThatSeesIt: the adjustment lasts
// until a measurement lists the instance on its new host (and no longer on
// its source); a measurement taken before the arrival keeps it.
func TestAssumedLoadEndsWithTheMeasurementThatSeesIt(t *testing.T) {
	c := newCloud(t, 2)
	now := c.clk.Now()
	c.measure(t, "h01", 0.50, now, map[string]float64{"vm": 8})
	c.measure(t, "h02", 0.10, now, nil)
	s := c.scheduler(t, metricsConfig(), PolicyClaim, 1)
	r := placement.Resources{placement.VCPU: 8, placement.MemoryMB: 1024, placement.DiskGB: 10}
	sel, err := s.Select(context.Background(), &Request{InstanceUUID: "vm", Resources: r, IgnoreHosts: []string{"h01"}}, storeClaim(c.st, "vm", r))
	if err != nil || sel.Host != "h02" {
		t.Fatalf("move: %v %v", sel.Host, err)
	}
	cpu := func(host string) (records.Metric, bool) {
		if err := s.View().Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s.View().byName[host].MeasuredMetric(records.MetricCPUPercent, c.clk.Now(), time.Minute)
	}
	// Its measured 8 CPUs of 32: h02 +0.25, h01 credited −0.25.
	if m, _ := cpu("h02"); m.Value != 0.35 || m.Source != SourceClaim {
		t.Errorf("h02 after the claim: %+v, want 0.35 from keel.claim", m)
	}
	if m, _ := cpu("h01"); m.Value != 0.25 {
		t.Errorf("h01 after the claim: %+v, want 0.25", m)
	}
	c.clk.Advance(10 * time.Second)
	c.measure(t, "h02", 0.12, c.clk.Now(), nil) // still copying: not there yet
	if m, _ := cpu("h02"); m.Value != 0.37 {
		t.Errorf("h02 measured before the arrival: %v, want 0.12 + 0.25", m.Value)
	}
	c.clk.Advance(10 * time.Second)
	c.measure(t, "h02", 0.36, c.clk.Now(), map[string]float64{"vm": 8})
	c.measure(t, "h01", 0.26, c.clk.Now(), nil)
	if m, _ := cpu("h02"); m.Value != 0.36 || m.Source != "test" {
		t.Errorf("h02 measured with the instance: %+v, want 0.36 as measured", m)
	}
	if m, _ := cpu("h01"); m.Value != 0.26 {
		t.Errorf("h01 measured without the instance: %v, want 0.26", m.Value)
	}
}

// TestMetricsUnavailable: a measurement older than max_age is unavailable;
// with required it fails the decision naming host and metric, without it
// weighs weight_of_unavailable, and MetricFilter skips the host.
func TestMetricsUnavailable(t *testing.T) {
	c := newCloud(t, 2)
	c.measure(t, "h01", 0.90, c.clk.Now().Add(-2*time.Minute), nil) // busy, but stale
	c.measure(t, "h02", 0.95, c.clk.Now(), nil)
	r := small()
	req := func() *Request { return &Request{InstanceUUID: "x", Resources: r} }

	cfg := metricsConfig()
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	if _, err := s.Select(context.Background(), req(), storeClaim(c.st, "x", r)); err == nil ||
		!strings.Contains(err.Error(), "metric cpu.percent of host h01 is unavailable") {
		t.Errorf("required: %v", err)
	}
	cfg.Metrics.Required = false
	s = c.scheduler(t, cfg, PolicyClaim, 1)
	exp, err := s.Explain(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range exp.Hosts {
		in := h.Scores[0].Inputs[0]
		switch h.Host {
		case "h01":
			if h.Rank != 2 || !in.Unavailable || in.AgeSeconds != 120 {
				t.Errorf("h01: rank %d, input %+v: want last, unavailable, 120 s old", h.Rank, in)
			}
		case "h02":
			if h.Rank != 1 || in.Value != 0.95 || in.AgeSeconds != 0 {
				t.Errorf("h02: rank %d, input %+v", h.Rank, in)
			}
		}
	}
	cfg.EnabledFilters = append(cfg.EnabledFilters, "MetricFilter")
	s = c.scheduler(t, cfg, PolicyClaim, 1)
	exp, _ = s.Explain(context.Background(), req())
	if exp.Hosts[0].RejectedBy != "MetricFilter" || exp.Hosts[0].Reason != "metric cpu.percent unavailable" {
		t.Errorf("MetricFilter on h01: %+v", exp.Hosts[0])
	}
}
