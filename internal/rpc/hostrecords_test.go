package rpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"keel/internal/records"
	"keel/internal/store/memory"
)

// batchingStore is a memory store that counts the batched and the single
// host record writes.
type batchingStore struct {
	*memory.Store
	mu      sync.Mutex
	batches [][]string
	singles int
}

func (b *batchingStore) PutHostRecords(ctx context.Context, recs []records.HostRecord) error {
	hosts := make([]string, len(recs))
	for i, h := range recs {
		hosts[i] = h.Host
	}
	b.mu.Lock()
	b.batches = append(b.batches, hosts)
	b.mu.Unlock()
	return b.Store.PutHostRecords(ctx, recs)
}

func (b *batchingStore) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	b.mu.Lock()
	b.singles++
	b.mu.Unlock()
	return b.Store.PutHostRecord(ctx, h)
}

// TestHostRecordsCommitTogether checks the group commit of the agents'
// host records (their metrics reports): the records sent within the
// gather window are written in one transaction, sorted by host; of two
// from one host only the newer is written, and each caller returns only
// once the record is stored; a record whose sender gave up is not
// written.
func TestHostRecordsCommitTogether(t *testing.T) {
	ctx := context.Background()
	st := &batchingStore{Store: memory.New()}
	w := newHostRecordWriter(st)
	if w.batch == nil {
		t.Fatal("a memory store batches host records, but the writer does not see it")
	}
	if w.gather <= 0 {
		t.Fatalf("gather = %v: reports would only commit together under contention", w.gather)
	}
	w.mu.Lock()
	w.gather = time.Second
	w.mu.Unlock()
	rec := func(host string, used int64) records.HostRecord {
		return records.HostRecord{Host: host, VCPUs: 8, VCPUsUsed: used}
	}
	var wg sync.WaitGroup
	for i := 9; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.add(ctx, rec(fmt.Sprintf("h%02d", i), 1)); err != nil {
				t.Errorf("host record: %v", err)
				return
			}
			// Answered means stored.
			if got, err := st.GetHostRecord(ctx, fmt.Sprintf("h%02d", i)); err != nil || got.VCPUsUsed == 0 {
				t.Errorf("h%02d answered but stored as %+v (%v)", i, got, err)
			}
		}()
	}
	wg.Wait()
	st.mu.Lock()
	singles, batches := st.singles, st.batches
	st.batches = nil
	st.mu.Unlock()
	if singles != 0 || len(batches) != 1 || len(batches[0]) != 10 || !slices.IsSorted(batches[0]) {
		t.Errorf("%d single writes and batches %v, want the 10 records in one sorted batch", singles, batches)
	}

	// Two reports of one host pending together: the one sent last wins,
	// and both callers learn it is stored. The writer starts once all
	// three are pending.
	for deadline := time.Now().Add(10 * time.Second); ; { // the first writer ends
		w.mu.Lock()
		idle := !w.writing
		if idle {
			w.writing, w.gather = true, 0
		}
		w.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never ends")
		}
		time.Sleep(time.Millisecond)
	}
	errs := make(chan error, 3)
	send := func(h records.HostRecord) {
		go func() { errs <- w.add(ctx, h) }()
	}
	waitPending := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); ; {
			w.mu.Lock()
			got := len(w.pending)
			w.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d records pending, want %d", got, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	send(rec("h01", 2))
	waitPending(1)
	send(rec("h00", 2))
	waitPending(2)
	send(rec("h01", 3))
	waitPending(3)
	// A report whose sender gave up before the write is not written.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.add(gone, rec("h05", 9)); err == nil {
		t.Error("a report sent with a cancelled context was answered as stored")
	}
	waitPending(4)
	go w.write()
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("host record: %v", err)
		}
	}
	if got, _ := st.GetHostRecord(ctx, "h01"); got.VCPUsUsed != 3 {
		t.Errorf("h01 uses %d vCPUs, want 3 (the newer report)", got.VCPUsUsed)
	}
	if got, _ := st.GetHostRecord(ctx, "h05"); got.VCPUsUsed != 1 {
		t.Errorf("h05 uses %d vCPUs, want 1 (the abandoned report not written)", got.VCPUsUsed)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.singles != 0 || len(st.batches) != 1 || !slices.Equal(st.batches[0], []string{"h00", "h01"}) {
		t.Errorf("%d single writes and batches %v, want one batch of h00 and h01", st.singles, st.batches)
	}
}

// TestUnchangedHostRecordsSkipped checks that a report that changes
// nothing beyond the tolerance over the record the writer last committed
// is answered without a write, until its measurement is recordRefresh
// newer; a change of any value beyond the tolerance, of the usage, or a
// host registering again is written at once.
func TestUnchangedHostRecordsSkipped(t *testing.T) {
	ctx := context.Background()
	st := &batchingStore{Store: memory.New()}
	w := newHostRecordWriter(st)
	t0 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	rec := func(at time.Duration, cpu float64, used int64) records.HostRecord {
		ts := t0.Add(at)
		return records.HostRecord{Host: "h01", VCPUs: 8, VCPUsUsed: used, UpdatedAt: t0,
			Metrics: []records.Metric{
				{Name: records.MetricCPUFrequency, Value: 2400, Timestamp: ts, Source: "fake"},
				{Name: records.MetricCPUPercent, Value: cpu, Timestamp: ts, Source: "fake"}},
			InstanceUsage: []records.InstanceUsage{{UUID: "i1", VCPUsBusy: 1, MemoryMB: 1024, Timestamp: ts}}}
	}
	writes := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.singles + len(st.batches)
	}
	stored := func() records.HostRecord {
		got, err := st.GetHostRecord(ctx, "h01")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i, step := range []struct {
		what  string
		rec   records.HostRecord
		write bool
		cpu   float64 // stored after the step
	}{
		{"the first report", rec(0, 0.25, 2), true, 0.25},
		{"the same values 10 s later", rec(10*time.Second, 0.25, 2), false, 0.25},
		{"cpu.percent within half a point", rec(12*time.Second, 0.254, 2), false, 0.25},
		{"cpu.percent moved a point", rec(13*time.Second, 0.26, 2), true, 0.26},
		{"the same values a refresh later", rec(13*time.Second+recordRefresh, 0.26, 2), true, 0.26},
		{"an older measurement", rec(14*time.Second, 0.26, 2), true, 0.26},
		{"the usage changed", rec(15*time.Second, 0.26, 3), true, 0.26},
	} {
		before := writes()
		if err := w.add(ctx, step.rec); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if wrote := writes() > before; wrote != step.write {
			t.Errorf("step %d, %s: wrote %v, want %v", i, step.what, wrote, step.write)
		}
		if got, _ := stored().Metric(records.MetricCPUPercent); got.Value != step.cpu {
			t.Errorf("step %d, %s: stored cpu.percent %v, want %v", i, step.what, got.Value, step.cpu)
		}
	}
	// A host that registers again has its next report written.
	before := writes()
	w.forget("h01")
	if err := w.add(ctx, rec(16*time.Second, 0.26, 3)); err != nil {
		t.Fatal(err)
	}
	if writes() == before {
		t.Error("the first report after forget was not written")
	}
	if got := stored().Metrics[0].Timestamp; !got.Equal(t0.Add(16 * time.Second)) {
		t.Errorf("stored measurement at %v, want the report's %v", got, t0.Add(16*time.Second))
	}
	// Another guest measured is a change, however close the values.
	r := rec(17*time.Second, 0.26, 3)
	r.InstanceUsage = append(r.InstanceUsage, records.InstanceUsage{UUID: "i2", Timestamp: r.Metrics[0].Timestamp})
	before = writes()
	if err := w.add(ctx, r); err != nil {
		t.Fatal(err)
	}
	if writes() == before || len(stored().InstanceUsage) != 2 {
		t.Errorf("a new guest's measurement was not written: %+v", stored().InstanceUsage)
	}
}
