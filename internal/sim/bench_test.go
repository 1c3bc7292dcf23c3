package sim

import (
	"context"
	"testing"

	"keel/internal/sim/scenario"
)

// BenchmarkGenerated10kHosts runs a generated scenario of 10,000 hosts
// with one boot, one delete and one live migration per second, audits
// hourly, for three simulated hours per iteration (policy claim). Multiply by
// 24 for the 24-hour figure, or run `keel sim --generate 10000 --hours 24`.
func BenchmarkGenerated10kHosts(b *testing.B) {
	sc := scenario.Generate(10000, 3, 1)
	for i := 0; i < b.N; i++ {
		rep, err := Run(context.Background(), sc, Options{Policies: []string{"claim"}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rep.Policies[0].Decisions), "decisions")
	}
}
