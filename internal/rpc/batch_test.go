package rpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"keel/internal/testenv"
)

// kv is an item of the group commit's test: a key and a value.
type kv struct{ k, v string }

// TestCoalescedAcrossBatches: a key queued again behind more than a
// batch's worth of other keys (the writer behind, as at 6,500 agents on a
// loaded machine) is written once, with its newest item, in the batch of
// its first, and both its callers are answered. Before, the batches were
// cut at maxBatch items in arrival order and the key was written twice.
func TestCoalescedAcrossBatches(t *testing.T) {
	ctx := testenv.Context(t)
	var mu sync.Mutex
	var written []kv
	release := make(chan struct{})
	blocking := true
	record := func(items ...kv) {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, items...)
	}
	g := &groupCommit[kv]{
		key:      func(i kv) string { return i.k },
		coalesce: true,
		gather:   time.Millisecond,
		writeOne: func(ctx context.Context, i kv) error {
			mu.Lock()
			b := blocking
			mu.Unlock()
			if b {
				<-release
			}
			record(i)
			return nil
		},
		writeMany: func(ctx context.Context, items []kv) error { record(items...); return nil },
	}
	// The first write holds the writer while the rest queue.
	first := make(chan error, 1)
	go func() { first <- g.add(ctx, kv{"block", "0"}) }()
	testenv.Poll(t, "the first write in flight", func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.pending) != 0 || !g.writing {
			return fmt.Errorf("%d pending", len(g.pending))
		}
		return nil
	})
	queued := func(n int) {
		testenv.Poll(t, "the items queued", func() error {
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.pending) != n {
				return fmt.Errorf("%d pending, want %d", len(g.pending), n)
			}
			return nil
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, maxBatch+2)
	add := func(i kv) {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- g.add(ctx, i) }()
	}
	add(kv{"a", "old"})
	queued(1)
	for i := range maxBatch {
		add(kv{fmt.Sprintf("k%03d", i), "x"})
	}
	queued(maxBatch + 1)
	add(kv{"a", "new"})
	queued(maxBatch + 2)
	mu.Lock()
	blocking = false
	mu.Unlock()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a caller got %v", err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var as []kv
	for _, i := range written {
		if i.k == "a" {
			as = append(as, i)
		}
	}
	if !slices.Equal(as, []kv{{"a", "new"}}) {
		t.Fatalf("key a written as %v, want once, its newest item", as)
	}
	if len(written) != maxBatch+2 {
		t.Errorf("%d items written, want %d (each key once)", len(written), maxBatch+2)
	}
}
