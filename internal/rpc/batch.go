package rpc

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxBatch bounds how many writes one transaction holds.
const maxBatch = 512

// batchGather is how long the writer waits, once a write is pending, for
// others to join it: a heartbeat or a metrics report is answered this
// much later (agents send one of each every 10 s), and at a hundred of
// them a second the server commits a few times per gather rather than a
// hundred times.
const batchGather = 50 * time.Millisecond

// batchWriteTimeout bounds one batch's write (its callers wait for it,
// each until its own deadline).
const batchWriteTimeout = 30 * time.Second

// groupCommit writes what its callers hand it in groups. The items that
// arrive within gather of the first pending one, or while a batch is
// being written, are written together by writeMany (one transaction),
// sorted by key; each caller returns once its item is committed, so an
// item answered is an item stored. If a batch fails as a whole, each of
// its items is written alone by writeOne, so the failure reaches only the
// item it concerns. Without writeMany, each item is written alone at once.
type groupCommit[T any] struct {
	key func(T) string
	// coalesce: of a batch's items with one key, only the last to arrive
	// is written (a newer host record replaces an older one whole), and
	// their callers share its outcome.
	coalesce  bool
	writeMany func(ctx context.Context, items []T) error // nil: no batches
	writeOne  func(ctx context.Context, item T) error
	// unchanged, when set (and writes are batched), tells whether item
	// need not be written over last, the item of its key this writer last
	// committed: its caller is answered at once, without a write, as
	// long as no other item of the key is pending or being written
	// (last is then what the store holds, unless another process wrote
	// the key since).
	unchanged func(last, item T) bool

	mu      sync.Mutex
	gather  time.Duration
	pending []*pendingWrite[T]
	writing bool
	// last is, per key, the item last committed (only with unchanged);
	// queued counts the items of a key pending or being written.
	last    map[string]T
	queued  map[string]int
	skipped int // items answered without a write (unchanged)
}

// pendingWrite is one item waiting to be written.
type pendingWrite[T any] struct {
	ctx  context.Context // the caller's: once it ends, nobody waits for the write
	item T
	done chan error // buffered: the writer never waits for the caller
}

// add writes item and returns once it is committed (or ctx ends).
func (g *groupCommit[T]) add(ctx context.Context, item T) error {
	if g.writeMany == nil {
		return g.writeOne(ctx, item)
	}
	p := &pendingWrite[T]{ctx: ctx, item: item, done: make(chan error, 1)}
	g.mu.Lock()
	if g.unchanged != nil {
		k := g.key(item)
		if last, ok := g.last[k]; ok && g.queued[k] == 0 && g.unchanged(last, item) {
			g.skipped++
			g.mu.Unlock()
			return nil
		}
		if g.queued == nil {
			g.queued, g.last = map[string]int{}, map[string]T{}
		}
		g.queued[k]++
	}
	g.pending = append(g.pending, p)
	if !g.writing {
		g.writing = true
		go g.write()
	}
	g.mu.Unlock()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes what is pending, batch after batch, until nothing is.
func (g *groupCommit[T]) write() {
	for {
		g.mu.Lock()
		gather := g.gather
		g.mu.Unlock()
		time.Sleep(gather)
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.writing = false
			g.mu.Unlock()
			return
		}
		batch := g.take()
		g.mu.Unlock()
		g.writeBatch(batch)
	}
}

// take removes the next batch from what is pending: maxBatch items in
// arrival order and, when coalescing, with them every item pending of
// their keys (maxBatch keys), so that a key queued many times while the
// writer was behind is written once, with its newest item, and not once
// per batch. At 6,500 agents on a loaded machine 15,870 host records
// waited for the writer, more than two per host. g.mu is held.
func (g *groupCommit[T]) take() []*pendingWrite[T] {
	if !g.coalesce {
		n := min(len(g.pending), maxBatch)
		batch := g.pending[:n:n]
		g.pending = slices.Clone(g.pending[n:])
		return batch
	}
	keys := make(map[string]bool, min(len(g.pending), maxBatch))
	var batch, rest []*pendingWrite[T]
	for _, p := range g.pending {
		k := g.key(p.item)
		if keys[k] || len(keys) < maxBatch {
			keys[k] = true
			batch = append(batch, p)
		} else {
			rest = append(rest, p)
		}
	}
	g.pending = rest
	return batch
}

// writeBatch writes one batch, sorted by key (stores that lock rows lock
// them in one order), and answers every caller in it. What only callers
// that gave up wait for is not written: a server that falls behind does
// not also write what was sent again meanwhile.
func (g *groupCommit[T]) writeBatch(batch []*pendingWrite[T]) {
	ctx, cancel := context.WithTimeout(context.Background(), batchWriteTimeout)
	defer cancel()
	slices.SortStableFunc(batch, func(a, b *pendingWrite[T]) int { return strings.Compare(g.key(a.item), g.key(b.item)) })
	// groups are the runs of one key when coalescing, else each item
	// alone; a group's last item is the one written.
	var groups [][]*pendingWrite[T]
	for i, p := range batch {
		if g.coalesce && i > 0 && g.key(p.item) == g.key(batch[i-1].item) {
			groups[len(groups)-1] = append(groups[len(groups)-1], p)
			continue
		}
		groups = append(groups, []*pendingWrite[T]{p})
	}
	// Each group's outcome is noted (settle) before its callers are
	// answered, so a caller's next item compares with what it stored.
	var abandoned [][]*pendingWrite[T]
	groups = slices.DeleteFunc(groups, func(grp []*pendingWrite[T]) bool {
		for _, p := range grp {
			if p.ctx.Err() == nil {
				return false
			}
		}
		abandoned = append(abandoned, grp)
		return true
	})
	for _, grp := range abandoned {
		g.settle(grp, nil, false)
		for _, p := range grp {
			p.done <- p.ctx.Err()
		}
	}
	if len(groups) == 0 {
		return
	}
	if len(groups) > 1 {
		items := make([]T, len(groups))
		for i, grp := range groups {
			items[i] = grp[len(grp)-1].item
		}
		if err := g.writeMany(ctx, items); err == nil {
			for _, grp := range groups {
				g.settle(grp, nil, true)
				for _, p := range grp {
					p.done <- nil
				}
			}
			return
		}
	}
	for _, grp := range groups {
		err := g.writeOne(ctx, grp[len(grp)-1].item)
		g.settle(grp, err, true)
		for _, p := range grp {
			p.done <- err
		}
	}
}

// settle notes a group's outcome when items may be skipped (unchanged):
// the item written is the key's last, a failed write forgets the key
// (the next item is written whatever it holds), and an abandoned group
// (not written) leaves the last committed item as it was.
func (g *groupCommit[T]) settle(grp []*pendingWrite[T], err error, written bool) {
	if g.unchanged == nil {
		return
	}
	k := g.key(grp[0].item)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case written && err == nil:
		g.last[k] = grp[len(grp)-1].item
	case written:
		delete(g.last, k)
	}
	if g.queued[k] -= len(grp); g.queued[k] <= 0 {
		delete(g.queued, k)
	}
}

// forget drops what the writer knows it last committed for key, so the
// key's next item is written whatever it holds.
func (g *groupCommit[T]) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.last, key)
}
