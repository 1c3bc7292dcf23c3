package conductor

import (
	"slices"
	"sync"
)

// slots is the slot table with the lock that guards it, shared by the
// conductor (its sweeps and counts) and the move effects (which take,
// hold and free slots).
type slots struct {
	mu  sync.Mutex
	tab *slotTable
}

// slotTable counts the live-migration slots of one replica: which
// migrations hold one, and which wait for one, in the order they asked.
// A migration holds its slot from the moment it may start preparing until
// its copy ends. Caps: perSource is Nova's max_concurrent_live_migrations
// (per source host); perDest and total, when above 0, also cap the
// migrations into one destination and across the cloud. It is pure (no
// locking, no I/O): slots guards it with its mutex and runs the
// steps of the migrations it hands slots to.
type slotTable struct {
	perSource, perDest, total int

	held    map[int64]slotKey // migration → the hosts it holds a slot of
	waiting []waiter          // in the order they asked
}

// slotKey is a migration's source and destination.
type slotKey struct{ src, dst string }

type waiter struct {
	id int64
	slotKey
}

func newSlotTable(perSource, perDest, total int) *slotTable {
	return &slotTable{perSource: max(perSource, 1), perDest: perDest, total: total, held: map[int64]slotKey{}}
}

// fits reports whether a migration src→dst may take a slot now.
func (s *slotTable) fits(k slotKey) bool {
	if s.total > 0 && len(s.held) >= s.total {
		return false
	}
	src, dst := 0, 0
	for _, h := range s.held {
		if h.src == k.src {
			src++
		}
		if h.dst == k.dst {
			dst++
		}
	}
	return src < s.perSource && (s.perDest <= 0 || dst < s.perDest)
}

// acquire gives id a slot now (true) or queues it (false). A repeat for
// a migration that holds or waits changes nothing.
func (s *slotTable) acquire(src, dst string, id int64) bool {
	if _, ok := s.held[id]; ok {
		return true
	}
	if s.isWaiting(id) {
		return false
	}
	k := slotKey{src, dst}
	if !s.queuedAhead(k) && s.fits(k) {
		s.held[id] = k
		return true
	}
	s.waiting = append(s.waiting, waiter{id, k})
	return false
}

// queuedAhead reports whether a waiting migration competes for the same
// cap as k: it goes first.
func (s *slotTable) queuedAhead(k slotKey) bool {
	return slices.ContainsFunc(s.waiting, func(w waiter) bool {
		return w.src == k.src || (s.perDest > 0 && w.dst == k.dst) || s.total > 0
	})
}

// hold counts a slot a running copy already holds (after a restart, when
// the table started empty), whatever the caps.
func (s *slotTable) hold(src, dst string, id int64) {
	s.forget(id)
	s.held[id] = slotKey{src, dst}
}

// release frees id's slot, if it holds one, and hands freed room to the
// waiting migrations that now fit, in the order they asked: it returns
// them, each now holding its slot (the caller runs their next step).
func (s *slotTable) release(id int64) []int64 {
	if _, ok := s.held[id]; !ok {
		return nil
	}
	delete(s.held, id)
	var granted []int64
	for i := 0; i < len(s.waiting); {
		w := s.waiting[i]
		if !s.fits(w.slotKey) {
			i++
			continue
		}
		s.held[w.id] = w.slotKey
		s.waiting = slices.Delete(s.waiting, i, i+1)
		granted = append(granted, w.id)
	}
	return granted
}

// forget drops id from the queue (it ended while waiting); it keeps a
// held slot, which only release frees.
func (s *slotTable) forget(id int64) {
	s.waiting = slices.DeleteFunc(s.waiting, func(w waiter) bool { return w.id == id })
}

func (s *slotTable) isWaiting(id int64) bool {
	return slices.ContainsFunc(s.waiting, func(w waiter) bool { return w.id == id })
}

func (s *slotTable) holds(id int64) bool {
	_, ok := s.held[id]
	return ok
}

// heldBySource lists the slot holders by source host, sorted.
func (s *slotTable) heldBySource() map[string][]int64 {
	out := map[string][]int64{}
	for id, k := range s.held {
		out[k.src] = append(out[k.src], id)
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// waitingIDs lists the migrations waiting for a slot.
func (s *slotTable) waitingIDs() []int64 {
	ids := make([]int64, len(s.waiting))
	for i, w := range s.waiting {
		ids[i] = w.id
	}
	return ids
}

// counts returns how many migrations wait and how many hold a slot.
func (s *slotTable) counts() (waiting, held int) { return len(s.waiting), len(s.held) }

// Remembered reports what the conductor keeps in memory about flows: the
// flow driver's per-record locks in use, migrations queued for a slot,
// and slots held, over all sources. All three are zero when no flow is
// active.
func (c *Conductor) Remembered() (locks, queued, slots int) {
	locks = c.flows.Locks()
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	queued, slots = c.slots.tab.counts()
	return locks, queued, slots
}
