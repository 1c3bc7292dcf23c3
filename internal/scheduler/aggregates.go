package scheduler

import (
	"slices"
	"strconv"
	"strings"
)

// AggregateMetadata merges the metadata of a host's aggregates as Nova's
// filters read it: key → every value, each metadata value split at commas
// and trimmed, without duplicates, sorted. The result feeds
// AggregateInstanceExtraSpecsFilter and AvailabilityZoneFilter; nil when
// the host is in no aggregate with metadata.
func AggregateMetadata(metadata []map[string]string) map[string][]string {
	var out map[string][]string
	for _, md := range metadata {
		for k, v := range md {
			if out == nil {
				out = map[string][]string{}
			}
			for _, part := range strings.Split(v, ",") {
				part = strings.TrimSpace(part)
				if !slices.Contains(out[k], part) {
					out[k] = append(out[k], part)
				}
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// WeightMultipliers returns the weigher multipliers a host's aggregates
// set (metadata keys named like the nova.conf options, e.g.
// ram_weight_multiplier), as Nova reads them: over the distinct values of
// a key across the host's aggregates (not split at commas), the smallest;
// if any of them is not a number, none (the configured multiplier holds).
// nil when no aggregate sets one.
func WeightMultipliers(metadata []map[string]string) map[string]float64 {
	vals := map[string][]string{}
	for _, md := range metadata {
		for k, v := range md {
			if strings.HasSuffix(k, "_weight_multiplier") && !slices.Contains(vals[k], v) {
				vals[k] = append(vals[k], v)
			}
		}
	}
	var out map[string]float64
	for k, vs := range vals {
		m, ok := 0.0, true
		for i, v := range vs {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				ok = false
				break
			}
			if i == 0 || f < m {
				m = f
			}
		}
		if ok {
			if out == nil {
				out = map[string]float64{}
			}
			out[k] = m
		}
	}
	return out
}

// setAggregates sets what a host's aggregates say: the merged metadata and
// the weigher multipliers they override.
func (h *HostState) setAggregates(metadata []map[string]string) {
	h.AggregateMetadata = AggregateMetadata(metadata)
	h.multipliers = WeightMultipliers(metadata)
}
