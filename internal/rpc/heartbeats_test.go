package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// gatedStore is a memory store whose next write, once gated, waits for
// the gate to open; it counts the batched and the single writes.
type gatedStore struct {
	*memory.Store
	mu      sync.Mutex
	gate    chan struct{}
	batches [][]string
	singles int
}

func (g *gatedStore) wait() {
	g.mu.Lock()
	gate := g.gate
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (g *gatedStore) UpdateServices(ctx context.Context, hosts []string, fn func(int, *records.Service) error) ([]records.Service, error) {
	g.wait()
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(hosts))
	g.mu.Unlock()
	return g.Store.UpdateServices(ctx, hosts, fn)
}

func (g *gatedStore) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	g.wait()
	g.mu.Lock()
	g.singles++
	g.mu.Unlock()
	return g.Store.UpdateService(ctx, host, fn)
}

// TestHeartbeatsCommitTogether checks the group commit of heartbeats:
// those that arrive while a write is in progress are written next in one
// transaction, sorted by host, each with its own time; a batch that fails
// (a host without a service record) is written one heartbeat at a time,
// so only that host's heartbeat fails.
func TestHeartbeatsCommitTogether(t *testing.T) {
	ctx := context.Background()
	st := &gatedStore{Store: memory.New()}
	for i := range 50 {
		if err := st.PutService(ctx, records.Service{Host: fmt.Sprintf("h%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(1_700_000_000, 0)
	r := newHeartbeatRecorder(st)
	if r.batch == nil {
		t.Fatal("a memory store batches service updates, but the recorder does not see it")
	}
	if r.gather <= 0 {
		t.Fatalf("gather = %v: heartbeats would only commit together under contention", r.gather)
	}
	// Heartbeats sent at once, within the gather window, commit together.
	r.mu.Lock()
	r.gather = time.Second
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.record(ctx, fmt.Sprintf("h%02d", i), t0); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
		}()
	}
	wg.Wait()
	st.mu.Lock()
	singles, batches := st.singles, st.batches
	st.mu.Unlock()
	if singles != 0 || len(batches) != 1 || len(batches[0]) != 10 {
		t.Errorf("%d single writes and batches %v, want the 10 heartbeats in one batch", singles, batches)
	}
	// The rest gates the writes instead of waiting.
	r.mu.Lock()
	r.gather = 0
	r.mu.Unlock()
	st.mu.Lock()
	st.batches = nil
	st.mu.Unlock()
	// beatAll sends hosts' heartbeats while the first one's write waits at
	// the gate, opens it once the others are pending, and returns each
	// heartbeat's error.
	beatAll := func(hosts []string) map[string]error {
		gate := make(chan struct{})
		st.mu.Lock()
		st.gate = gate
		st.mu.Unlock()
		errs := map[string]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		beat := func(i int, h string) {
			defer wg.Done()
			err := r.record(ctx, h, t0.Add(time.Duration(i)*time.Second))
			mu.Lock()
			errs[h] = err
			mu.Unlock()
		}
		wg.Add(len(hosts))
		go beat(0, hosts[0])
		waitPending := func(n int) {
			for deadline := time.Now().Add(10 * time.Second); ; {
				r.mu.Lock()
				got, writing := len(r.pending), r.writing
				r.mu.Unlock()
				if got == n && writing {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d heartbeats pending, want %d", got, n)
				}
				time.Sleep(time.Millisecond)
			}
		}
		waitPending(0) // the first is taken and waits at the gate
		// Let the writer take the first heartbeat before the others queue.
		for {
			st.mu.Lock()
			taken := st.gate == nil
			st.mu.Unlock()
			if taken {
				break
			}
			time.Sleep(time.Millisecond)
		}
		for i, h := range hosts[1:] {
			go beat(i+1, h)
		}
		waitPending(len(hosts) - 1)
		close(gate)
		wg.Wait()
		return errs
	}

	// Reversed, so that the batch must sort them.
	var hosts []string
	for i := 49; i >= 0; i-- {
		hosts = append(hosts, fmt.Sprintf("h%02d", i))
	}
	for h, err := range beatAll(hosts) {
		if err != nil {
			t.Errorf("heartbeat of %s: %v", h, err)
		}
	}
	if st.singles != 1 || len(st.batches) != 1 || len(st.batches[0]) != 49 || !slices.IsSorted(st.batches[0]) {
		t.Errorf("%d single writes and batches %v, want the first heartbeat alone, then the 49 others in one sorted batch", st.singles, st.batches)
	}
	for i, h := range hosts {
		sv, err := st.GetService(ctx, h)
		if want := t0.Add(time.Duration(i) * time.Second); err != nil || !sv.LastSeenUp.Equal(want) || !sv.UpdatedAt.Equal(want) {
			t.Errorf("%s: last seen up %v, updated %v (%v), want both %v", h, sv.LastSeenUp, sv.UpdatedAt, err, want)
		}
	}

	// A host without a service record fails the batch: each is then
	// written alone, and only its heartbeat fails.
	st.mu.Lock()
	st.singles, st.batches = 0, nil
	st.mu.Unlock()
	errs := beatAll([]string{"h00", "h01", "ghost", "h02"})
	for h, err := range errs {
		if want := h == "ghost"; want != errors.Is(err, store.ErrNotFound) || (!want && err != nil) {
			t.Errorf("heartbeat of %s: %v", h, err)
		}
	}
	if len(st.batches) != 1 || st.singles != 1+3 {
		t.Errorf("%d single writes and batches %v, want the first alone, one failed batch of 3, then its 3 alone", st.singles, st.batches)
	}
}
