package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// MetricsWeigher and MetricFilter: Nova's weigher and filter of the
// hosts' measured values (compute_nodes.metrics, here the host record's
// Metrics), with Nova's [metrics] options, and keel's two changes: a
// measurement older than [metrics] max_age counts as unavailable, and —
// under the claim policy — a claim the scheduler commits adjusts the
// measured view of the host at once by the instance's expected load (its
// last measured usage, else its flavor's vCPUs all busy), and credits a
// move's source, until a measurement that sees the instance arrive (or
// leave) replaces the adjustment: the "assume" rule keel applies to
// allocations, applied to measured load.

// MetricWeight is one name=ratio of [metrics] weight_setting.
type MetricWeight struct {
	Name  string
	Ratio float64
}

// MetricsConfig is the [metrics] options the scheduler reads besides
// weight_multiplier (a registry option, in Config.Options).
type MetricsConfig struct {
	// WeightSetting is weight_setting: the metrics weighed and their
	// ratios (empty: MetricsWeigher weighs nothing, Nova's default).
	WeightSetting []MetricWeight
	// Required is required (Nova's default true): a weighed host without
	// one of the metrics fails the decision; otherwise it weighs
	// WeightOfUnavailable.
	Required bool
	// WeightOfUnavailable is weight_of_unavailable (-10000.0).
	WeightOfUnavailable float64
	// MaxAge is max_age (keel's): a measurement older than this counts as
	// unavailable; 0 never.
	MaxAge time.Duration
}

// DefaultMetricsConfig returns Nova's defaults and keel's max_age of 60 s.
func DefaultMetricsConfig() MetricsConfig {
	return MetricsConfig{Required: true, WeightOfUnavailable: -10000.0, MaxAge: 60 * time.Second}
}

// ParseWeightSetting reads weight_setting items (name=ratio), as Nova's
// parse_options does but refusing what Nova only warns about: an item
// without '=', an empty name, a ratio that is not a number.
func ParseWeightSetting(items []string) ([]MetricWeight, error) {
	var out []MetricWeight
	for _, it := range items {
		name, ratio, ok := strings.Cut(it, "=")
		name, ratio = strings.TrimSpace(name), strings.TrimSpace(ratio)
		if !ok || name == "" {
			return nil, fmt.Errorf("weight_setting item %q: want name=ratio, e.g. cpu.percent=-1.0", it)
		}
		f, err := strconv.ParseFloat(ratio, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("weight_setting item %q: ratio %q is not a number", it, ratio)
		}
		out = append(out, MetricWeight{Name: name, Ratio: f})
	}
	return out, nil
}

// metricsWeigherName is MetricsWeigher's registry name, and
// metricsAggregateKey the aggregate metadata key of its multiplier.
const (
	metricsWeigherName  = "MetricsWeigher"
	metricsAggregateKey = "metrics_weight_multiplier"
)

var metricsWeigher = WeigherSpec{
	Name: metricsWeigherName,
	Multiplier: Option{Name: "weight_multiplier", Group: "metrics", Aggregate: metricsAggregateKey, Default: 1.0,
		Help: "MetricsWeigher's multiplier: positive prefers hosts whose weighed metrics (weight_setting) sum highest, negative lowest."},
	Active:  func(r *Request) bool { return r.metrics != nil && len(r.metrics.WeightSetting) > 0 },
	Request: metricsRaw,
	Reads:   "the sum of ratio × measured value over [metrics] weight_setting (host record metrics, claims assumed)",
}

// metricsRaw is Nova's MetricsWeigher._weigh_object over the host's
// measured view at the request's time (Explain's reference reading; a
// decision reads the same value from the host's dense row, metricsValue
// at the view's refresh time): a missing or too old metric fails the
// decision when required.
func metricsRaw(h *HostState, r *Request) float64 {
	if r.metrics == nil {
		return 0
	}
	v, missing := metricsValue(h, r.metrics, r.metricsMult, r.now)
	if missing != "" && r.metricErr == nil {
		r.metricErr = metricMissingError(h.Name, missing)
	}
	return v
}

// metricsValue is MetricsWeigher's raw value of a host at now: the sum of
// ratio × weighed value over weight_setting. A metric missing or older
// than max_age makes the host weigh weight_of_unavailable (unless its
// ratio × the host's multiplier is 0), or, when required, is returned as
// missing (the value is then 0 and the decision fails if it weighs the
// host).
func metricsValue(h *HostState, mc *MetricsConfig, mult float64, now time.Time) (v float64, missing string) {
	for _, w := range mc.WeightSetting {
		m, ok := h.MeasuredMetric(w.Name, now, mc.MaxAge)
		if ok {
			v += weighedValue(m) * w.Ratio
			continue
		}
		if mc.Required {
			return 0, w.Name
		}
		if m, ok := h.multipliers[metricsAggregateKey]; ok {
			mult = m // Nova asks the host's multiplier, its aggregates' if they set one
		}
		if w.Ratio*mult != 0 {
			return mc.WeightOfUnavailable, ""
		}
	}
	return v, ""
}

// metricsExpiry is when the host's MetricsWeigher value next changes by
// age alone: the first moment after now at which a weighed metric
// available at now is older than max_age (Unix nanoseconds; 0 never).
func metricsExpiry(h *HostState, mc *MetricsConfig, now time.Time) int64 {
	if mc.MaxAge <= 0 || !h.HasRecord {
		return 0
	}
	var first int64
	for _, w := range mc.WeightSetting {
		m, ok := h.Record.Metric(w.Name)
		if !ok || now.Sub(m.Timestamp) > mc.MaxAge {
			continue
		}
		if e := m.Timestamp.Add(mc.MaxAge).UnixNano(); first == 0 || e < first {
			first = e
		}
	}
	return first
}

// metricMissingError is the decision's failure when a weighed host lacks
// a metric and [metrics] required is true.
func metricMissingError(host, metric string) *NoValidHostError {
	return &NoValidHostError{Reason: fmt.Sprintf(
		"MetricsWeigher: metric %s of host %s is unavailable (none reported, or older than [metrics] max_age) and [metrics] required is true; enable MetricFilter to skip such hosts, or set required = false",
		metric, host)}
}

// weighedValue is a metric as Nova's scheduler weighs it: its HostState
// reads compute_nodes.metrics through MonitorMetricList.from_json, which
// turns the stored fractions of the *.percent metrics back into percents
// and every value into a whole number (MonitorMetric.value is an
// IntegerField; Python's int() truncates toward zero, so a stored 0.29
// weighs 28).
func weighedValue(m records.Metric) float64 {
	v := m.Value
	switch m.Name {
	case records.MetricCPUPercent, records.MetricCPUUserPercent, records.MetricCPUKernelPercent,
		records.MetricCPUIdlePercent, records.MetricCPUIOWaitPercent:
		v *= 100
	}
	return math.Trunc(v)
}

// metricFilter is Nova's MetricFilter: a host passes when it reports
// every metric of weight_setting (fresh, here: within max_age).
type metricFilter struct{ cfg MetricsConfig }

var metricFilterSpec = FilterSpec{
	Name:  "MetricFilter",
	New:   func(c Config) Filter { return metricFilter{cfg: c.Metrics} },
	Reads: "the host reports every metric of [metrics] weight_setting, measured within max_age",
}

func (metricFilter) Name() string         { return "MetricFilter" }
func (metricFilter) Active(*Request) bool { return true }
func (f metricFilter) Fits(h *HostState, r *Request) bool {
	return f.missing(h, r.now) == ""
}
func (f metricFilter) Why(h *HostState, r *Request) string {
	return "metric " + f.missing(h, r.now) + " unavailable"
}

func (f metricFilter) missing(h *HostState, now time.Time) string {
	for _, w := range f.cfg.WeightSetting {
		if _, ok := h.MeasuredMetric(w.Name, now, f.cfg.MaxAge); !ok {
			return w.Name
		}
	}
	return ""
}

// assumedLoad is a claim's expected load on a host's measured CPU and
// memory: busy (physical CPUs) and memMB (MiB) for instance uuid, assumed
// at at; both negative on a move's source (leaving).
type assumedLoad struct {
	uuid    string
	busy    float64
	memMB   float64
	at      time.Time
	leaving bool
}

// SourceClaim is the Source of a metric the scheduler adjusted by claims.
const SourceClaim = "keel.claim"

// MeasuredMetric returns a host's measured metric as the weigher reads
// it: the record's, unavailable when missing or older than maxAge (0: no
// bound), with the CPU metrics and keel.memory.available adjusted by the
// loads assumed since.
func (h *HostState) MeasuredMetric(name string, now time.Time, maxAge time.Duration) (records.Metric, bool) {
	if !h.HasRecord {
		return records.Metric{}, false
	}
	m, ok := h.Record.Metric(name)
	if !ok || (maxAge > 0 && now.Sub(m.Timestamp) > maxAge) {
		return records.Metric{}, false
	}
	if len(h.assumed) == 0 {
		return m, true
	}
	sign := 0.0
	switch name {
	case records.MetricCPUPercent, records.MetricCPUUserPercent:
		sign = 1
	case records.MetricCPUIdlePercent:
		sign = -1
	case records.MetricMemoryAvailable:
		mem := 0.0
		for _, a := range h.assumed {
			mem += a.memMB
		}
		m.Value = max(m.Value-mem, 0)
		if t, ok := h.Record.Metric(records.MetricMemoryTotal); ok {
			m.Value = min(m.Value, t.Value)
		}
		m.Source = SourceClaim
		return m, true
	default:
		return m, true
	}
	cpus := float64(h.inv[iVCPU].Total)
	if cpus <= 0 {
		return m, true
	}
	busy := 0.0
	for _, a := range h.assumed {
		busy += a.busy
	}
	m.Value = math.Min(math.Max(m.Value+sign*busy/cpus, 0), 1)
	m.Source = SourceClaim
	return m, true
}

// usageOf is where the view last saw an instance measured, and what it
// used there.
type usageOf struct {
	host  string
	busy  float64
	memMB float64
}

// indexUsage records the instances a host's record measured, after
// forgetting those its previous record listed.
func (v *View) indexUsage(h *HostState, old records.HostRecord) {
	for _, u := range old.InstanceUsage {
		if w, ok := v.usage[u.UUID]; ok && w.host == h.Name {
			delete(v.usage, u.UUID)
		}
	}
	if !h.HasRecord || len(h.Record.InstanceUsage) == 0 {
		return
	}
	if v.usage == nil {
		v.usage = map[string]usageOf{}
	}
	for _, u := range h.Record.InstanceUsage {
		v.usage[u.UUID] = usageOf{host: h.Name, busy: u.VCPUsBusy, memMB: float64(u.MemoryMB)}
	}
}

// pruneAssumed drops the assumed loads a new measurement of the host
// accounts for: an arrival once the instance is measured here, a
// departure once it is not, and any assumption a measurement taken
// assumeFor after it still does not confirm (the move failed, or is
// still copying: the measurement is the truth again).
func (h *HostState) pruneAssumed(assumeFor time.Duration) {
	if len(h.assumed) == 0 || !h.HasRecord {
		return
	}
	m, ok := h.Record.Metric(records.MetricCPUPercent)
	if !ok {
		return
	}
	measured := func(uuid string) bool {
		return slices.ContainsFunc(h.Record.InstanceUsage, func(u records.InstanceUsage) bool { return u.UUID == uuid })
	}
	h.assumed = slices.DeleteFunc(h.assumed, func(a assumedLoad) bool {
		if m.Timestamp.Before(a.at) {
			return false
		}
		return !a.leaving == measured(a.uuid) || m.Timestamp.Sub(a.at) > assumeFor
	})
}

// assumeLoad adjusts the measured view of the host a claim chose by the
// instance's expected load, and credits the host it was measured on (a
// move's source).
func (v *View) assumeLoad(h *HostState, r *Request, now time.Time) {
	if r.InstanceUUID == "" {
		return
	}
	busy, mem := float64(r.Resources[placement.VCPU]), float64(r.Resources[placement.MemoryMB])
	u, measured := v.usage[r.InstanceUUID]
	if measured {
		busy, mem = u.busy, u.memMB
	}
	if measured && u.host != h.Name {
		if src := v.byName[u.host]; src != nil {
			src.assumed = append(src.assumed, assumedLoad{uuid: r.InstanceUUID, busy: -busy, memMB: -mem, at: now, leaving: true})
			v.dense.sync(src)
		}
	}
	if measured && u.host == h.Name {
		return // a resize on its own host: already measured here
	}
	h.assumed = append(h.assumed, assumedLoad{uuid: r.InstanceUUID, busy: busy, memMB: mem, at: now})
	v.dense.sync(h)
}

// MetricInput is one weighed metric of a host as a decision read it.
type MetricInput struct {
	Name  string  `json:"name"`
	Ratio float64 `json:"ratio"`
	// Value is the measured value, adjusted by claims when Source says
	// keel.claim; Unavailable when the host has none or it is too old.
	Value       float64 `json:"value"`
	Unavailable bool    `json:"unavailable,omitempty"`
	// AgeSeconds is the measurement's age at the decision.
	AgeSeconds float64 `json:"age_seconds"`
	Source     string  `json:"source,omitempty"`
}

// metricInputs lists a host's weighed metrics for Explain.
func (s *Scheduler) metricInputs(h *HostState, now time.Time) []MetricInput {
	var out []MetricInput
	for _, w := range s.cfg.Metrics.WeightSetting {
		in := MetricInput{Name: w.Name, Ratio: w.Ratio}
		if m, ok := h.MeasuredMetric(w.Name, now, s.cfg.Metrics.MaxAge); ok {
			in.Value, in.Source = m.Value, m.Source
			in.AgeSeconds = now.Sub(m.Timestamp).Seconds()
		} else {
			in.Unavailable = true
			if m, ok := h.Record.Metric(w.Name); ok && h.HasRecord {
				in.AgeSeconds = now.Sub(m.Timestamp).Seconds()
			}
		}
		out = append(out, in)
	}
	return out
}
