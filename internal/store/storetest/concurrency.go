package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/store"
)

var concurrencyTests = []subtest{
	{"ClaimsWithProviderGenerations", func(t *testing.T, s store.Store) { testConcurrentClaims(t, s, true) }},
	{"ClaimsWithoutProviderGenerations", func(t *testing.T, s store.Store) { testConcurrentClaims(t, s, false) }},
	{"ConsumerUpdates", testConcurrentConsumerUpdates},
}

const (
	claimWorkers   = 16
	claimsPer      = 50
	claimProviders = 4
	claimCapacity  = 40 // VCPU per provider; 160 in all, for 800 claims
)

// testConcurrentClaims has claimWorkers goroutines make claimsPer claims of
// one VCPU each on a few small providers, as schedulers racing for the same
// hosts do. With useGens each write names the provider generation read just
// before it and retries on a conflict; a capacity error moves the claim on to
// the next provider. Afterwards no provider may be over capacity, every
// successful claim must be in the usage exactly once, and the change stream
// must hold one entry per successful claim.
func testConcurrentClaims(t *testing.T, s store.Store, useGens bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &claimRace{t: t, s: s, useGens: useGens}
	for i := 0; i < claimProviders; i++ {
		r.provs = append(r.provs, mustCreateProvider(t, s, i, placement.Inventories{placement.VCPU: placement.NewInventory(claimCapacity)}).UUID)
	}
	since, err := s.LastChange(ctx)
	if err != nil {
		t.Fatalf("LastChange: %v", err)
	}

	done := make(chan struct{})
	readerDone := r.watchCapacity(ctx, done)
	var writers sync.WaitGroup
	for w := 0; w < claimWorkers; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r.worker(ctx, w)
		}()
	}
	writers.Wait()
	close(done)
	<-readerDone
	if t.Failed() {
		return
	}
	t.Logf("%d claims succeeded, %d capacity refusals, %d generation conflicts retried", r.successes.Load(), r.refusals.Load(), r.conflicts.Load())
	sums := r.checkSettled(ctx)
	r.checkChanges(ctx, since, sums)
}

// claimRace is one run of testConcurrentClaims: the providers, and what
// the writers counted and won.
type claimRace struct {
	t       *testing.T
	s       store.Store
	useGens bool
	provs   []string

	successes, conflicts, refusals atomic.Int64
	won                            sync.Map // consumer → provider
}

// watchCapacity reads the summaries until done while the writers run: no
// snapshot may show a provider over capacity. The channel it returns
// closes when it has stopped.
func (r *claimRace) watchCapacity(ctx context.Context, done <-chan struct{}) <-chan struct{} {
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			sums, err := r.s.ProviderSummaries(ctx, r.provs)
			if err != nil {
				r.t.Errorf("ProviderSummaries during claims: %v", err)
				return
			}
			for _, ps := range sums {
				if ps.Usage[placement.VCPU] > claimCapacity {
					r.t.Errorf("provider %s seen at %d VCPU of %d", ps.UUID, ps.Usage[placement.VCPU], claimCapacity)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return readerDone
}

// worker is writer w: claimsPer claims, each tried on the providers in
// turn from its own starting point until one takes it.
func (r *claimRace) worker(ctx context.Context, w int) {
	full := map[string]bool{} // usage only grows here, so full stays full
	for i := 0; i < claimsPer; i++ {
		consumer := uuidFor(kindConsumer, w*claimsPer+i)
		for k := 0; k < claimProviders; k++ {
			p := r.provs[(w+i+k)%claimProviders]
			if full[p] {
				continue
			}
			placed, ok := r.claim(ctx, consumer, p)
			if !ok {
				return
			}
			if placed {
				break
			}
			full[p] = true
		}
	}
}

// claim claims one VCPU on p for consumer, retrying generation conflicts:
// placed if it committed, not placed if p is full; !ok after a failure the
// test reported.
func (r *claimRace) claim(ctx context.Context, consumer, p string) (placed, ok bool) {
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil || attempt > 10000 {
			r.t.Errorf("claim %s on %s: gave up after %d attempts (%v)", consumer, p, attempt, ctx.Err())
			return false, false
		}
		wr := placement.AllocationWrite{
			ConsumerUUID: consumer,
			Allocations:  map[string]placement.Resources{p: {placement.VCPU: 1}},
		}
		if r.useGens {
			pr, err := r.s.GetProvider(ctx, p)
			if err != nil {
				r.t.Errorf("GetProvider: %v", err)
				return false, false
			}
			wr.ProviderGenerations = map[string]int64{p: pr.Generation}
		}
		_, err := r.s.WriteAllocations(ctx, wr)
		if err == nil {
			r.successes.Add(1)
			r.won.Store(consumer, p)
			return true, true
		}
		if placement.IsCapacity(err) {
			r.refusals.Add(1)
			return false, true
		}
		if r.useGens && placement.IsConflict(err) {
			if ce := wantConflict(r.t, "concurrent claim", err, placement.ProviderGeneration, p); ce == nil || ce.Kind != placement.ProviderGeneration {
				return false, false
			}
			r.conflicts.Add(1)
			continue
		}
		r.t.Errorf("claim %s on %s: unexpected error %v", consumer, p, err)
		return false, false
	}
}

// checkSettled checks the providers after the race: none over capacity,
// a generation bump per claim, every unit taken, the usage equal to the
// successful claims and to the allocations, and each winner holding its
// one VCPU. It returns the providers' summaries.
func (r *claimRace) checkSettled(ctx context.Context) []store.ProviderSummary {
	t, s := r.t, r.s
	sums, err := s.ProviderSummaries(ctx, r.provs)
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	var used int64
	for _, ps := range sums {
		u := ps.Usage[placement.VCPU]
		used += u
		if u > claimCapacity {
			t.Errorf("provider %s overcommitted: %d VCPU of %d", ps.UUID, u, claimCapacity)
		}
		// Each claim bumped the generation once (creation made it 1).
		if ps.Generation != 1+u {
			t.Errorf("provider %s at generation %d after %d claims, want %d", ps.UUID, ps.Generation, u, 1+u)
		}
	}
	if used != r.successes.Load() {
		t.Errorf("summed usage %d, but %d claims succeeded", used, r.successes.Load())
	}
	// 800 claims for 160 units: every unit must end up taken, since a claim
	// only gives up after each provider refused it for capacity.
	if want := int64(claimProviders * claimCapacity); used != want {
		t.Errorf("summed usage %d, want all %d units taken", used, want)
	}
	checkUsageMatchesAllocations(t, s)
	r.won.Range(func(k, v any) bool {
		c, err := s.GetConsumer(ctx, k.(string))
		if err != nil {
			t.Errorf("GetConsumer of a successful claim: %v", err)
			return false
		}
		if c.Generation != 1 || !c.Allocations[v.(string)].Equal(placement.Resources{placement.VCPU: 1}) || len(c.Allocations) != 1 {
			t.Errorf("consumer %s = %+v, want one VCPU on %s", k, c, v)
			return false
		}
		return true
	})
	return sums
}

// checkChanges checks the change stream since the race began: increasing
// sequence numbers, provider changes only, one per claim on each provider.
func (r *claimRace) checkChanges(ctx context.Context, since int64, sums []store.ProviderSummary) {
	t := r.t
	changes, err := r.s.Changes(ctx, since, noLimit)
	if err != nil {
		t.Fatalf("Changes: %v", err)
	}
	perProvider := map[string]int64{}
	prev := since
	for _, c := range changes {
		if c.Seq <= prev {
			t.Errorf("change Seq %d after %d", c.Seq, prev)
		}
		prev = c.Seq
		if c.Kind != store.ChangeProvider {
			t.Errorf("unexpected change %+v", c)
		}
		perProvider[c.Key]++
	}
	for _, ps := range sums {
		if perProvider[ps.UUID] != ps.Usage[placement.VCPU] {
			t.Errorf("provider %s: %d changes in the stream for %d claims", ps.UUID, perProvider[ps.UUID], ps.Usage[placement.VCPU])
		}
	}
}

// testConcurrentConsumerUpdates has goroutines rewrite one consumer, each
// naming the generation it just read: no update may be lost, so the final
// generation is one more than the number of successful updates.
func testConcurrentConsumerUpdates(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, placement.Inventories{placement.VCPU: placement.NewInventory(1000)})
	c := consumerUUID(1)
	mustClaim(t, s, c, map[string]placement.Resources{p.UUID: {placement.VCPU: 1}})

	const workers, tries = 8, 25
	var ok, conflicts atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < tries; i++ {
				cur, err := s.GetConsumer(ctx, c)
				if err != nil {
					t.Errorf("GetConsumer: %v", err)
					return
				}
				_, err = s.WriteAllocations(ctx, placement.AllocationWrite{
					ConsumerUUID: c, ConsumerGeneration: gen(cur.Generation),
					Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: int64(1 + (w*tries+i)%7)}},
				})
				switch {
				case err == nil:
					ok.Add(1)
				case placement.IsConflict(err):
					wantConflict(t, "concurrent consumer update", err, placement.ConsumerGeneration, c)
					conflicts.Add(1)
				default:
					t.Errorf("update: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d updates succeeded, %d conflicts", ok.Load(), conflicts.Load())
	if ok.Load() == 0 {
		t.Fatal("no update succeeded")
	}
	if ok.Load()+conflicts.Load() != workers*tries {
		t.Errorf("%d successes + %d conflicts, want %d attempts", ok.Load(), conflicts.Load(), workers*tries)
	}
	got := mustGetConsumer(t, s, c)
	if got.Generation != 1+ok.Load() {
		t.Errorf("consumer generation %d after %d successful updates, want %d", got.Generation, ok.Load(), 1+ok.Load())
	}
	if pg := mustGetProvider(t, s, p.UUID).Generation; pg != 2+ok.Load() {
		t.Errorf("provider generation %d after %d successful updates, want %d", pg, ok.Load(), 2+ok.Load())
	}
	wantUsage(t, s, p.UUID, got.Allocations[p.UUID])
}
