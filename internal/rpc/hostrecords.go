package rpc

import (
	"math"
	"reflect"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

// hostRecordWriter writes the host records the agents send (their audits'
// and their metrics reports, one every 10 s per host). With a store that
// batches (store.HostRecordBatch), the records that arrive together are
// written in one transaction, and of two from one host only the newer
// (a record replaces the older one whole); with any other store, each is
// its own PutHostRecord. Either way an agent's call returns once its
// record is committed.
//
// With a batching store, a record that changes nothing beyond
// recordTolerance over the one this writer last committed for its host,
// and whose measurement is less than recordRefresh newer, is answered
// without a write (unchangedRecord): an idle host's reports, which only
// move their timestamps, are stored every other report rather than every
// one.
type hostRecordWriter struct {
	*groupCommit[records.HostRecord]
	batch store.HostRecordBatch // nil: one write per record
}

// recordRefresh bounds how far the stored record of a host whose reports
// change nothing lags behind its latest report: its measurement's
// timestamps are at most this much older than the newest report's (the
// metrics' age that [metrics] max_age, 60 s, judges, and that the web
// view and /metrics show, stays under about recordRefresh plus one
// report interval: 25 s at the default 10 s).
const recordRefresh = 15 * time.Second

// recordTolerance is how much a measured value may move without the
// record counting as changed: half a point of a fraction (cpu.percent
// 0.250 to 0.254), or half a percent of a larger value (cpu.frequency,
// a guest's memory). The agent's own threshold for reporting at once
// ([metrics] report_threshold) is 10 points.
const recordTolerance = 0.005

func newHostRecordWriter(st ServedStore) *hostRecordWriter {
	b, _ := st.(store.HostRecordBatch)
	g := &groupCommit[records.HostRecord]{
		key:      func(h records.HostRecord) string { return h.Host },
		coalesce: true,
		gather:   batchGather,
		writeOne: st.PutHostRecord,
		unchanged: func(last, rec records.HostRecord) bool {
			return unchangedRecord(last, rec, recordRefresh)
		},
	}
	if b != nil {
		g.writeMany = b.PutHostRecords
	}
	return &hostRecordWriter{groupCommit: g, batch: b}
}

// unchangedRecord tells whether rec need not replace last: every field
// equal but the times, every measured value within recordTolerance, the
// same guests measured, and rec's newest time not older than last's nor
// refresh or more newer.
func unchangedRecord(last, rec records.HostRecord, refresh time.Duration) bool {
	t0, t1 := newestTime(last), newestTime(rec)
	if t1.Before(t0) || t1.Sub(t0) >= refresh {
		return false
	}
	if len(last.Metrics) != len(rec.Metrics) || len(last.InstanceUsage) != len(rec.InstanceUsage) {
		return false
	}
	for i, m := range last.Metrics {
		n := rec.Metrics[i]
		if m.Name != n.Name || m.Source != n.Source || !near(m.Value, n.Value) {
			return false
		}
	}
	for i, u := range last.InstanceUsage {
		v := rec.InstanceUsage[i]
		if u.UUID != v.UUID || !near(u.VCPUsBusy, v.VCPUsBusy) || !near(float64(u.MemoryMB), float64(v.MemoryMB)) {
			return false
		}
	}
	// Everything else (usage, inventory, ratios, failed builds) exactly.
	last.Metrics, last.InstanceUsage, last.UpdatedAt = nil, nil, time.Time{}
	rec.Metrics, rec.InstanceUsage, rec.UpdatedAt = nil, nil, time.Time{}
	return reflect.DeepEqual(last, rec)
}

// near tells whether two measured values differ by at most
// recordTolerance (absolute up to 1, relative above).
func near(a, b float64) bool {
	return math.Abs(a-b) <= recordTolerance*max(1, math.Abs(a), math.Abs(b))
}

// newestTime is the latest time a host record carries: its update's, its
// metrics' and its guests' measurements'.
func newestTime(h records.HostRecord) time.Time {
	t := h.UpdatedAt
	for _, m := range h.Metrics {
		if m.Timestamp.After(t) {
			t = m.Timestamp
		}
	}
	for _, u := range h.InstanceUsage {
		if u.Timestamp.After(t) {
			t = u.Timestamp
		}
	}
	return t
}
