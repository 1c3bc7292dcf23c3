// Package memory is an in-memory store.Store, used by the simulator and by
// tests. One mutex serialises every call, which makes each call atomic; it
// passes the same conformance suite as the durable stores.
//
// Store is split by role as the SQL stores are: Placement keeps
// placement's providers and allocations (placement.go, tree.go,
// consumers.go), Records the compute records (records.go and the files
// named after each record, as sqlstore.Records does for both SQL stores),
// Identity the identity document and the agents' credentials
// (identity.go). Placement and Records share one lock and one change
// stream (core); Store composes the three.
package memory

import (
	"context"
	"sync"

	"keel/internal/store"
)

// maxChanges is how many change-stream entries are kept; older readers get
// store.ErrChangesTrimmed and reload.
const maxChanges = 1 << 18

// Store is the in-memory store: every role, each kept by the part that
// implements it.
type Store struct {
	// core is the lock and the change stream Placement and Records
	// share; Store answers Changes and LastChange from it.
	*core
	*Placement
	*Records
	*Identity
}

// core is what the roles share: the one lock every call of Placement and
// Records holds, which makes a call that writes both (Records.DeleteService)
// atomic, and the change stream their writes append to.
type core struct {
	mu      sync.Mutex
	changes []store.Change
	seq     int64
}

// The store's roles, each asserted, so that a reader of a role finds its
// implementers here (and in the other stores).
var (
	_ store.Providers     = (*Store)(nil)
	_ store.Allocations   = (*Store)(nil)
	_ store.Placement     = (*Store)(nil)
	_ store.Hosts         = (*Store)(nil)
	_ store.Instances     = (*Store)(nil)
	_ store.Migrations    = (*Store)(nil)
	_ store.Flavors       = (*Store)(nil)
	_ store.Groups        = (*Store)(nil)
	_ store.KeyPairs      = (*Store)(nil)
	_ store.Quotas        = (*Store)(nil)
	_ store.Plans         = (*Store)(nil)
	_ store.Records       = (*Store)(nil)
	_ store.IdentityStore = (*Store)(nil)
	_ store.Changes       = (*Store)(nil)
	_ store.Store         = (*Store)(nil)

	// Each part alone implements its roles.
	_ store.Placement       = (*Placement)(nil)
	_ store.Records         = (*Records)(nil)
	_ store.ServiceBatch    = (*Records)(nil)
	_ store.HostRecordBatch = (*Records)(nil)
	_ store.HostBatchReader = (*Records)(nil)
	_ store.IdentityStore   = (*Identity)(nil)
)

// New returns an empty store.
func New() *Store {
	c := &core{}
	pl := newPlacement(c)
	return &Store{core: c, Placement: pl, Records: newRecords(c, pl), Identity: &Identity{}}
}

func (c *core) note(kind store.ChangeKind, key string) {
	c.seq++
	c.changes = append(c.changes, store.Change{Seq: c.seq, Kind: kind, Key: key})
	if len(c.changes) > maxChanges {
		// In place: Changes hands out copies, so nothing else holds these
		// entries (a new slice each time was most of what noting cost).
		n := copy(c.changes, c.changes[len(c.changes)-maxChanges/2:])
		clear(c.changes[n:])
		c.changes = c.changes[:n]
	}
}

// Changes implements store.Changes.
func (c *core) Changes(_ context.Context, since int64, limit int) ([]store.Change, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.changes) == 0 {
		return nil, nil
	}
	first := c.changes[0].Seq
	if since < first-1 {
		return nil, store.ErrChangesTrimmed
	}
	i := int(since - first + 1)
	if i >= len(c.changes) {
		return nil, nil
	}
	end := len(c.changes)
	if limit > 0 && i+limit < end {
		end = i + limit
	}
	return append([]store.Change(nil), c.changes[i:end]...), nil
}

// LastChange implements store.Changes.
func (c *core) LastChange(_ context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq, nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }
