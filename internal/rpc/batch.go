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

	mu      sync.Mutex
	gather  time.Duration
	pending []*pendingWrite[T]
	writing bool
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
		n := min(len(g.pending), maxBatch)
		if n == 0 {
			g.writing = false
			g.mu.Unlock()
			return
		}
		batch := g.pending[:n:n]
		g.pending = slices.Clone(g.pending[n:])
		g.mu.Unlock()
		g.writeBatch(batch)
	}
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
	groups = slices.DeleteFunc(groups, func(grp []*pendingWrite[T]) bool {
		for _, p := range grp {
			if p.ctx.Err() == nil {
				return false
			}
		}
		for _, p := range grp {
			p.done <- p.ctx.Err()
		}
		return true
	})
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
				for _, p := range grp {
					p.done <- nil
				}
			}
			return
		}
	}
	for _, grp := range groups {
		err := g.writeOne(ctx, grp[len(grp)-1].item)
		for _, p := range grp {
			p.done <- err
		}
	}
}
