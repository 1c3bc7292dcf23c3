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
