package scenario

import (
	"fmt"
	"math"
)

// Generate builds a large scenario in code, for benchmarks ("10,000 hosts ×
// 24 h"): hosts hosts in three groups (60 % 32 cores / 128 GiB / 2 TB, 30 %
// 64 / 256 GiB / 4 TB, 10 % 16 / 64 GiB / 1 TB), each starting about 44 %
// full of RAM; hourly audits spread over the hour; a steady state of one
// boot, one delete and one random live migration a second for hours hours;
// host_subset_size 3; service_down_time 0 (no liveness check, so no
// heartbeats); all three policies. Defaults are applied and the
// result passes Validate.
func Generate(hosts int, hours float64, seed int64) *Scenario {
	hosts = max(hosts, 1)
	duration := math.Max(hours*3600, 1)

	s := &Scenario{
		Name:     fmt.Sprintf("generated-%d-hosts-%gh", hosts, hours),
		Seed:     seed,
		Duration: duration,
		Scheduler: Scheduler{
			HostSubsetSize: 3,
			// Liveness is not what this scenario measures: with the check
			// off no heartbeat is written (at 10,000 hosts, 14 million
			// store writes a day that change no decision).
			ServiceDownTime: new(float64),
		},
		Compute: Compute{
			UpdateResourcesInterval: 3600,
		},
		Flavors: []Flavor{
			{Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
			{Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40},
			{Name: "m1.large", VCPUs: 4, RAMMB: 8192, DiskGB: 80},
		},
		Workloads: []Workload{
			// Boots draw small/medium/large equally, the initial mix, so
			// deleting random instances at the same rate holds the fleet's
			// RAM use steady (about 4.7 GiB in, 4.7 GiB out a second).
			{Kind: KindBoot, Rate: 1, Flavors: map[string]float64{"m1.small": 1, "m1.medium": 1, "m1.large": 1}},
			{Kind: KindDelete, Rate: 1},
			{Kind: KindMigrate, Rate: 1},
		},
	}

	// Group sizes: 60 % / 30 % / the rest, dropping empty groups.
	std := hosts * 6 / 10
	big := hosts * 3 / 10
	small := hosts - std - big
	type shape struct {
		prefix        string
		count         int
		vcpus, ramGiB int64
		diskGB        int64
		each          int // small, medium and large instances of each
	}
	// "each" of each of three flavors uses 14 GiB × each: 4 → 56 of
	// 127.5 GiB usable (44 %), 8 → 112 of 255.5 (44 %), 2 → 28 of 63.5 (44 %).
	for _, sh := range []shape{
		{"std", std, 32, 128, 2000, 4},
		{"big", big, 64, 256, 4000, 8},
		{"small", small, 16, 64, 1000, 2},
	} {
		if sh.count == 0 {
			continue
		}
		s.HostGroups = append(s.HostGroups, HostGroup{
			Prefix:   sh.prefix,
			Count:    sh.count,
			VCPUs:    sh.vcpus,
			MemoryMB: sh.ramGiB * 1024,
			DiskGB:   sh.diskGB,
			Instances: map[string]int{
				"m1.small": sh.each, "m1.medium": sh.each, "m1.large": sh.each,
			},
			AuditSpread: true,
		})
	}
	s.ApplyDefaults()
	return s
}
