package memory

import (
	"cmp"
	"slices"

	"keel/internal/placement"
)

// consumerRec is a consumer as the store keeps it. A placement.Consumer
// holds its allocations as a map of maps (two maps per consumer, each a
// few hundred bytes of pointers the collector reads on every cycle); the
// store keeps them as one slice of numbers instead, providers and classes
// by index into the store's tables (ids), and builds the maps only for a
// caller that asks (consumer). The simulator's 10,000-host day holds
// 180,000 consumers: about 110 MB as maps, a quarter of that this way.
type consumerRec struct {
	projectID, userID string
	typ               placement.ConsumerType
	gen               int64
	// allocs is sorted by provider index, then class index.
	allocs []allocEntry
}

// allocEntry is one class's amount on one provider. A provider named
// with no resources at all (which placement's plans never write) is kept
// as one entry of class noClass.
type allocEntry struct {
	prov  int32
	class int32
	n     int64
}

// noClass marks the entry of a provider held with no resources.
const noClass = -1

// ids numbers provider UUIDs and resource classes for allocEntry. Numbers
// are never reused or taken back (a store names a few thousand providers
// and a handful of classes over its life).
type ids struct {
	provs    []string
	provIdx  map[string]int32
	classes  []placement.ResourceClass
	classIdx map[placement.ResourceClass]int32
}

func (t *ids) prov(uuid string) int32 {
	if i, ok := t.provIdx[uuid]; ok {
		return i
	}
	if t.provIdx == nil {
		t.provIdx = map[string]int32{}
	}
	i := int32(len(t.provs))
	t.provs = append(t.provs, uuid)
	t.provIdx[uuid] = i
	return i
}

func (t *ids) class(rc placement.ResourceClass) int32 {
	if i, ok := t.classIdx[rc]; ok {
		return i
	}
	if t.classIdx == nil {
		t.classIdx = map[placement.ResourceClass]int32{}
	}
	i := int32(len(t.classes))
	t.classes = append(t.classes, rc)
	t.classIdx[rc] = i
	return i
}

// pack is c as the store keeps it.
func (t *ids) pack(c *placement.Consumer) consumerRec {
	n := 0
	for _, r := range c.Allocations {
		n += max(len(r), 1)
	}
	es := make([]allocEntry, 0, n)
	for p, r := range c.Allocations {
		pi := t.prov(p)
		if len(r) == 0 {
			es = append(es, allocEntry{prov: pi, class: noClass})
		}
		for rc, amt := range r {
			es = append(es, allocEntry{prov: pi, class: t.class(rc), n: amt})
		}
	}
	slices.SortFunc(es, func(a, b allocEntry) int {
		return cmp.Or(cmp.Compare(a.prov, b.prov), cmp.Compare(a.class, b.class))
	})
	return consumerRec{projectID: c.ProjectID, userID: c.UserID, typ: c.Type, gen: c.Generation, allocs: es}
}

// header is the consumer without its allocations (Allocations nil).
func (r *consumerRec) header(uuid string) placement.Consumer {
	return placement.Consumer{UUID: uuid, ProjectID: r.projectID, UserID: r.userID, Type: r.typ, Generation: r.gen}
}

// consumer is the whole consumer, its allocations built afresh (the
// caller's to keep).
func (t *ids) consumer(uuid string, r *consumerRec) placement.Consumer {
	c := r.header(uuid)
	provs := 0
	for i, e := range r.allocs {
		if i == 0 || e.prov != r.allocs[i-1].prov {
			provs++
		}
	}
	c.Allocations = make(map[string]placement.Resources, provs)
	for i := 0; i < len(r.allocs); {
		j := i + 1
		for j < len(r.allocs) && r.allocs[j].prov == r.allocs[i].prov {
			j++
		}
		res := make(placement.Resources, j-i)
		for _, e := range r.allocs[i:j] {
			if e.class != noClass {
				res[t.classes[e.class]] = e.n
			}
		}
		c.Allocations[t.provs[r.allocs[i].prov]] = res
		i = j
	}
	return c
}

// eachProvider calls fn once for each provider r holds allocations on,
// with that provider's entries.
func (r *consumerRec) eachProvider(fn func(prov int32, es []allocEntry)) {
	for i := 0; i < len(r.allocs); {
		j := i + 1
		for j < len(r.allocs) && r.allocs[j].prov == r.allocs[i].prov {
			j++
		}
		fn(r.allocs[i].prov, r.allocs[i:j])
		i = j
	}
}

// addConsumerOn files consumer c's header (Allocations nil) under
// provider p, in UUID order. Called with mu held.
func (pl *Placement) addConsumerOn(p string, c placement.Consumer) {
	heads := pl.byProvider[p]
	i, found := slices.BinarySearchFunc(heads, c.UUID, byUUID)
	if found {
		heads[i] = c
		return
	}
	pl.byProvider[p] = slices.Insert(heads, i, c)
}

// dropConsumerOn takes consumer uuid off provider p's list. Called with
// mu held.
func (pl *Placement) dropConsumerOn(p, uuid string) {
	heads := pl.byProvider[p]
	i, found := slices.BinarySearchFunc(heads, uuid, byUUID)
	if !found {
		return
	}
	if len(heads) == 1 {
		delete(pl.byProvider, p)
		return
	}
	pl.byProvider[p] = slices.Delete(heads, i, i+1)
}

func byUUID(c placement.Consumer, uuid string) int { return cmp.Compare(c.UUID, uuid) }
