package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"keel/internal/records"
)

// registrySamples is the cloud's samples collected as client_golang's
// const metrics: the registry's encoding of them is the oracle of
// metricsText's.
type registrySamples struct {
	c     *cloudCollector
	descs map[*gauge]*prometheus.Desc
}

func (r registrySamples) Describe(chan<- *prometheus.Desc) {} // unchecked

func (r registrySamples) Collect(ch chan<- prometheus.Metric) {
	r.c.collect(context.Background(), func(g *gauge, v float64, lv ...string) {
		d := r.descs[g]
		if d == nil {
			d = prometheus.NewDesc(g.name, g.help, g.labels, nil)
			r.descs[g] = d
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	})
}

// TestMetricsTextAsRegistry: the cloud's gauges written straight in the
// text format say what client_golang's registry said of the same samples —
// the same lines (HELP, TYPE, every sample with its labels in the same
// order and its value in the same form; the registry also sorts the
// samples of a family, which Prometheus does not need), label values with
// a quote, a backslash and a newline escaped — and parse as one family
// each. /metrics serves them after the registry's own.
func TestMetricsTextAsRegistry(t *testing.T) {
	ctx := context.Background()
	st := bigCloud(t, 40, 1)
	now := time.Now()
	if _, err := st.CreateAggregate(ctx, records.Aggregate{UUID: "00000000-0000-0000-0000-00000000a991", Name: `rack "7" \ row` + "\nB",
		Hosts: []string{"h0001", "h0002"}, Metadata: map[string]string{records.AggregateZoneKey: "az1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateService(ctx, "h0003", func(s *records.Service) error {
		s.Disabled, s.DisabledReason = true, "disk \"sdb\" failing\nticket #12"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h0001", "h0004"} {
		if err := st.PutHostRecord(ctx, records.HostRecord{Host: h, VCPUs: 32, VCPUsUsed: 1, MemoryMB: 131072, MemoryMBUsed: 2048, LocalGB: 2000,
			LocalGBUsed: 20, RunningVMs: 1, UpdatedAt: now,
			Metrics: []records.Metric{{Name: records.MetricCPUPercent, Value: 0.125, Timestamp: now, Source: "fake"},
				{Name: records.MetricCPUFrequency, Value: 2.6e3, Timestamp: now, Source: "fake"},
				{Name: records.MetricMemoryTotal, Value: 131072, Timestamp: now, Source: "fake"}},
			InstanceUsage: []records.InstanceUsage{{UUID: "vm-" + h, VCPUsBusy: 1.0 / 3, MemoryMB: 1000, Timestamp: now}}}); err != nil {
			t.Fatal(err)
		}
	}
	u := newUIHub(st, newHostView(st), time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	u.now = func() time.Time { return now.Add(5 * time.Second) } // the metrics' age, the same in both
	c := newCloudCollector(u)

	text := newMetricsText(len(c.gauges))
	c.collect(ctx, text.add)
	var ours bytes.Buffer
	if err := text.writeTo(&ours, c.gauges); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(registrySamples{c: c, descs: map[*gauge]*prometheus.Desc{}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var theirs bytes.Buffer
	enc := expfmt.NewEncoder(&theirs, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(b bytes.Buffer) []string {
		l := strings.Split(strings.TrimSpace(b.String()), "\n")
		slices.Sort(l)
		return l
	}
	a, b := lines(ours), lines(theirs)
	if !slices.Equal(a, b) {
		for _, l := range a {
			if !slices.Contains(b, l) {
				t.Errorf("written, not the registry's: %s", l)
			}
		}
		for _, l := range b {
			if !slices.Contains(a, l) {
				t.Errorf("the registry's, not written: %s", l)
			}
		}
	}
	for _, want := range []string{`aggregates="rack \"7\" \\ row\nB"`, `disabledReason="disk \"sdb\" failing\nticket #12"`,
		`openstack_nova_cpu_percent{aggregates="",availability_zone="nova",hostname="h0004"} 0.125`,
		`openstack_nova_server_cpu_busy{hypervisor_hostname="h0001",id="vm-h0001"} 0.3333333333333333`,
		`keel_hypervisor_memory_total_bytes{aggregates="",availability_zone="nova",hostname="h0004"} 1.37438953472e+11`} {
		if !strings.Contains(ours.String(), want) {
			t.Errorf("no %s in the written gauges", want)
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(ours.Bytes()))
	if err != nil {
		t.Fatalf("the written gauges do not parse: %v", err)
	}
	if got := len(fams["openstack_placement_resource_total"].GetMetric()); got != 40*3 {
		t.Errorf("%d openstack_placement_resource_total samples, want 120 (40 hosts, 3 classes)", got)
	}

	// /metrics: the registry's metrics and the cloud's, one family each.
	m := newMetrics()
	rec := httptest.NewRecorder()
	m.handler(st, time.Minute, c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fams, err = p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"keel_agents", "go_goroutines", "openstack_nova_agent_state", "openstack_placement_resource_usage"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
}
