package scheduler

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The registry: one row per filter and per weigher. Everything else is
// derived from these two tables — the decision's fast path (which dense
// row slot a weigher fills, how a filter reads a row), Explain, the
// defaults and checks of Config, the configuration file's options
// (internal/config), the simulator's scenario keys (internal/sim) and the
// table of filters and weighers in docs/configuration.md (WriteTable).
//
// Adding a weigher is its WeigherSpec (a file of its own, or next to its
// peers in weighers.go) and one row here; adding a filter, its FilterSpec
// and one row. TestFastPathAgreesWithExplain runs every row.
var (
	filterTable = [...]FilterSpec{
		computeFilterSpec, zoneFilterSpec, capabilitiesFilterSpec, imagePropsFilterSpec,
		antiAffinityFilterSpec, affinityFilterSpec, sameHostFilterSpec, differentHostFilterSpec,
		aggregateSpecsFilterSpec, numInstancesFilterSpec, ioOpsFilterSpec,
		metricFilterSpec, resourceFilterSpec,
	}
	weigherTable = [...]WeigherSpec{
		ramWeigher, cpuWeigher, diskWeigher, ioOpsWeigher,
		buildFailureWeigher, numInstancesWeigher,
		softAffinityWeigher, softAntiAffinityWeigher, metricsWeigher,
	}
)

// numWeighers sizes the dense rows: a host-only weigher keeps its raw
// value in the slot of its row in weigherTable.
const numWeighers = len(weigherTable)

// Option is one option a filter or weigher reads ([filter_scheduler]
// unless Group says otherwise).
type Option struct {
	// Name is the nova.conf name.
	Name string
	// Group is its nova.conf group when not filter_scheduler
	// (MetricsWeigher's [metrics] weight_multiplier).
	Group string
	// Aggregate is the aggregate metadata key that overrides a weigher's
	// multiplier for the aggregate's hosts, when not Name
	// (metrics_weight_multiplier).
	Aggregate string
	// Default is Nova's default.
	Default float64
	// Integer options take whole numbers only.
	Integer bool
	// Min, when HasMin, is the smallest accepted value.
	HasMin bool
	Min    float64
	// Help is the option's documentation (the sample file's comment).
	Help string
}

// aggregateKey is the aggregate metadata key of a multiplier option.
func (o Option) aggregateKey() string {
	if o.Aggregate != "" {
		return o.Aggregate
	}
	return o.Name
}

// check refuses a value the option does not accept.
func (o Option) check(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s must be a finite number, got %v", o.Name, v)
	case o.Integer && v != math.Trunc(v):
		return fmt.Errorf("%s must be a whole number, got %v", o.Name, v)
	case o.HasMin && v < o.Min:
		return fmt.Errorf("%s must be at least %v, got %v", o.Name, o.Min, v)
	}
	return nil
}

// WeigherSpec is one weigher. A host's term is multiplier × (raw − lo) /
// (hi − lo) over the candidates' raw values (0 when they are all equal),
// Nova's normalisation.
type WeigherSpec struct {
	// Name is Nova's class name.
	Name string
	// Multiplier is its *_weight_multiplier option. A host's aggregates
	// may set the same key for that host (the smallest of their values).
	Multiplier Option
	// Host reads the raw value from a host alone. The decision keeps it in
	// the host's dense row, refreshed whenever the host changes. Nil for a
	// weigher whose value depends on the request (Request).
	Host func(h *HostState) float64
	// Request is the per-request part: the raw value of a weigher that
	// depends on the request, computed per decision.
	Request func(h *HostState, r *Request) float64
	// Active reports whether the weigher can be anything but 0 for r (nil:
	// always); an inactive weigher is skipped.
	Active func(r *Request) bool
	// FixedMin: the range starts at 0 (Nova's minval = 0) and raw values
	// below 0 count as 0; otherwise it starts at the candidates' smallest
	// value.
	FixedMin bool
	// Negated is the sign: the term is −multiplier × normalised value (Nova
	// weighs BuildFailureWeigher's failure count and negates the
	// multiplier, configured or from an aggregate).
	Negated bool
	// Reads says in a few words what the raw value is, for the
	// documentation.
	Reads string
}

func (w *WeigherSpec) active(r *Request) bool { return w.Active == nil || w.Active(r) }

// raw is the reference reading of the weigher's raw value: what Explain
// uses, and what the dense rows cache for a host-only weigher.
func (w *WeigherSpec) raw(h *HostState, r *Request) float64 {
	if w.Host != nil {
		return w.Host(h)
	}
	return w.Request(h, r)
}

// FilterSpec is one filter.
type FilterSpec struct {
	// Name is Nova's class name.
	Name string
	// Options are the [filter_scheduler] options it reads.
	Options []Option
	// Default: in the default enabled_filters.
	Default bool
	// Always: runs first for every request whether listed or not.
	Always bool
	// New builds the filter for a configuration. Its Fits and Why on the
	// HostState are the reference (Explain's path).
	New func(c Config) Filter
	// row says how the decision's hot loop reads the filter from a host's
	// dense row instead of calling Fits; rowHost calls Fits.
	row rowForm
	// Reads says in a few words what it checks, for the documentation.
	Reads string
}

// rowForm is how the decision's filter pass reads a filter.
type rowForm uint8

const (
	// rowHost: Fits on the HostState.
	rowHost rowForm = iota
	// rowResources: the row's free amounts of the standard classes
	// (fitRow.fits); Fits only for other classes and traits.
	rowResources
	// rowService: the row's service flags and last heartbeat against
	// service_down_time.
	rowService
)

// KnownFilters are the filter names keel implements, in the registry's
// order. ResourceFilter is always applied first and need not be listed.
var KnownFilters = func() []string {
	out := make([]string, len(filterTable))
	for i := range filterTable {
		out[i] = filterTable[i].Name
	}
	return out
}()

// KnownWeighers are the weigher names keel implements, in the registry's
// order (the default weight_classes).
var KnownWeighers = func() []string {
	out := make([]string, len(weigherTable))
	for i := range weigherTable {
		out[i] = weigherTable[i].Name
	}
	return out
}()

func filterSpec(name string) *FilterSpec {
	for i := range filterTable {
		if filterTable[i].Name == name {
			return &filterTable[i]
		}
	}
	return nil
}

// weigherSlot returns the weigher's row in weigherTable, or -1.
func weigherSlot(name string) int {
	for i := range weigherTable {
		if weigherTable[i].Name == name {
			return i
		}
	}
	return -1
}

// WeigherOptions are the weighers' multiplier options, in the registry's
// order.
func WeigherOptions() []Option {
	out := make([]Option, len(weigherTable))
	for i := range weigherTable {
		out[i] = weigherTable[i].Multiplier
	}
	return out
}

// FilterOptions are the filters' own options, in the registry's order.
func FilterOptions() []Option {
	var out []Option
	for i := range filterTable {
		out = append(out, filterTable[i].Options...)
	}
	return out
}

// LookupOption finds a filter's or weigher's option by name.
func LookupOption(name string) (Option, bool) {
	o, ok := optionIndex[name]
	return o, ok
}

// optionIndex holds every option by name. It is filled by init, not by
// its initializer, because the filters' constructors read options: an
// initializer would make the tables depend on themselves.
var optionIndex map[string]Option

func init() {
	optionIndex = map[string]Option{}
	for _, o := range append(WeigherOptions(), FilterOptions()...) {
		if _, dup := optionIndex[o.Name]; dup {
			panic("scheduler: option defined twice: " + o.Name)
		}
		optionIndex[o.Name] = o
	}
	seen := map[string]bool{}
	for _, n := range append(append([]string(nil), KnownFilters...), KnownWeighers...) {
		if seen[n] {
			panic("scheduler: name registered twice: " + n)
		}
		seen[n] = true
	}
}

// WriteTable writes the registry as docs/configuration.md's Markdown table: every
// filter and weigher with its option, default and what it reads.
func WriteTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| filter / weigher | option (default) | reads |\n|---|---|---|\n")
	for i := range filterTable {
		f := &filterTable[i]
		var opts []string
		for _, o := range f.Options {
			opts = append(opts, fmt.Sprintf("`%s` (%v)", o.Name, o.Default))
		}
		if len(opts) == 0 {
			opts = []string{"—"}
		}
		reads := f.Reads
		switch {
		case f.Always:
			reads += "; always runs first"
		case f.Default:
			reads += "; enabled by default"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Name, strings.Join(opts, ", "), reads)
	}
	for i := range weigherTable {
		wt := &weigherTable[i]
		reads := wt.Reads
		if wt.FixedMin {
			reads += ", range from 0"
		}
		if wt.Negated {
			reads += ", multiplier negated"
		}
		if wt.Host == nil {
			reads += " (per request)"
		}
		name := wt.Multiplier.Name
		if wt.Multiplier.Group != "" {
			name = "[" + wt.Multiplier.Group + "] " + name
		}
		fmt.Fprintf(&b, "| `%s` | `%s` (%v) | %s |\n", wt.Name, name, wt.Multiplier.Default, reads)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
