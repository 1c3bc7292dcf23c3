package server

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/requestid"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// Metrics are the server's Prometheus metrics, on a registry of its own
// (several servers in one test process do not collide).
type Metrics struct {
	reg          *prometheus.Registry
	decisions    *prometheus.HistogramVec
	claims       *prometheus.CounterVec
	conflicts    prometheus.Counter
	migrations   *prometheus.CounterVec
	migrationDur prometheus.Histogram
	builds       *prometheus.CounterVec
	requests     *prometheus.CounterVec
	drift        *prometheus.CounterVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "keel_scheduler_decision_seconds", Help: "Time to filter, weigh and claim, per decision.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}, []string{"kind"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_scheduler_claims_total", Help: "Scheduling decisions by outcome (claimed, no_valid_host, error).",
		}, []string{"kind", "outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keel_scheduler_claim_conflicts_total", Help: "Claims the store refused on a stale generation or a full host.",
		}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_live_migrations_total", Help: "Live migrations by final status.",
		}, []string{"status"}),
		migrationDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "keel_live_migration_duration_seconds", Help: "From accepted to a final status.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_builds_total", Help: "Boots by outcome (active, error).",
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_http_requests_total", Help: "HTTP requests by method and status code.",
		}, []string{"method", "code"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_audit_drift_total",
			Help: "Differences the agents' periodic audits found and healed, by kind: a host-record field (vcpus_used, memory_mb_used, local_gb_used, running_vms), untracked, vanished, missing_allocation, orphan_allocation, stray, lost.",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.decisions, m.claims, m.conflicts, m.migrations, m.migrationDur, m.builds, m.requests, m.drift,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) hooks() conductor.Hooks {
	return conductor.Hooks{
		Decision: func(kind string, _ records.Instance, sel scheduler.Selection, err error) {
			m.decisions.WithLabelValues(kind).Observe(sel.Duration.Seconds())
			m.conflicts.Add(float64(sel.Conflicts))
			switch {
			case err == nil:
				m.claims.WithLabelValues(kind, "claimed").Inc()
			case scheduler.IsNoValidHost(err):
				m.claims.WithLabelValues(kind, "no_valid_host").Inc()
			default:
				m.claims.WithLabelValues(kind, "error").Inc()
			}
		},
		MigrationDone: func(mg records.Migration) {
			m.migrations.WithLabelValues(string(mg.Status)).Inc()
			if !mg.CreatedAt.IsZero() {
				m.migrationDur.Observe(mg.UpdatedAt.Sub(mg.CreatedAt).Seconds())
			}
		},
		BuildDone: func(in records.Instance) {
			m.builds.WithLabelValues(string(in.VMState)).Inc()
		},
	}
}

// agentsCollector reports agents up and down at scrape time.
type agentsCollector struct {
	st       store.Hosts
	downTime time.Duration
	desc     *prometheus.Desc
}

func (c *agentsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *agentsCollector) Collect(ch chan<- prometheus.Metric) {
	svcs, err := c.st.ListServices(context.Background())
	if err != nil {
		return
	}
	up, down := 0, 0
	now := time.Now()
	for _, s := range svcs {
		if !s.IsCompute() {
			continue // a keel server replica's heartbeat
		}
		if !s.ForcedDown && (c.downTime <= 0 || now.Sub(s.LastSeenUp) <= c.downTime) {
			up++
		} else {
			down++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(up), "up")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(down), "down")
}

// handler serves /metrics: the registry's metrics (the Go runtime's, the
// process's, keel's counters and histograms, the agents by liveness) and,
// if cloud is not nil, the cloud's gauges, written straight in the text
// format (metricsText) after them; gzipped when the scraper asks.
func (m *Metrics) handler(st store.Hosts, downTime time.Duration, cloud *cloudCollector) http.Handler {
	m.reg.MustRegister(&agentsCollector{st: st, downTime: downTime,
		desc: prometheus.NewDesc("keel_agents", "Compute agents by liveness (service_down_time).", []string{"state"}, nil)})
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mfs, err := m.reg.Gather()
		if err != nil {
			http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		var text *metricsText
		if cloud != nil {
			text = cloud.text()
			defer cloud.putText(text)
			cloud.collect(r.Context(), text.add)
		}
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
			defer gz.Close()
			out = gz
		}
		bw := bufio.NewWriterSize(out, 64<<10)
		defer bw.Flush()
		enc := expfmt.NewEncoder(bw, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				return // the scraper went away
			}
		}
		if text != nil {
			_ = text.writeTo(bw, cloud.gauges)
		}
	})
}

// instrument counts requests by method and status.
// instrument counts requests and gives every response its request id,
// which the log line of a failed request carries too.
func (m *Metrics) instrument(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestid.Ensure(w)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r)
		m.requests.WithLabelValues(r.Method, strconv.Itoa(rec.status)).Inc()
		if rec.status >= 500 {
			log.Warn("request failed", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "duration", time.Since(start))
		} else {
			log.Debug("request", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "duration", time.Since(start))
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

// Unwrap gives http.ResponseController the writer underneath (the web
// view's event stream flushes through it).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// observeDrift counts an agent audit's findings.
func (m *Metrics) observeDrift(d compute.Drift) {
	for _, r := range d.Record {
		field, _, _ := strings.Cut(r, " ")
		m.drift.WithLabelValues(field).Inc()
	}
	for kind, xs := range map[string][]string{
		"untracked": d.Untracked, "vanished": d.Vanished, "missing_allocation": d.MissingAllocations,
		"orphan_allocation": d.OrphanAllocations, "stray": d.Stray, "missing": d.Missing, "lost": d.Lost, "found": d.Found,
	} {
		if len(xs) > 0 {
			m.drift.WithLabelValues(kind).Add(float64(len(xs)))
		}
	}
}
