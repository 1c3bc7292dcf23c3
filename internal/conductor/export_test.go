package conductor

// Remembered reports what the conductor keeps in memory about migrations:
// per-migration locks, migrations queued for a slot, and slots held, over
// all sources. All three are zero when no migration is active.
func (c *Conductor) Remembered() (locks, queued, slots int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queued, slots = c.slotTab.counts()
	return len(c.locks), queued, slots
}
