package scheduler

import (
	"slices"
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
