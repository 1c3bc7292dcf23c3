package quota

import (
	"errors"
	"testing"

	"keel/internal/records"
)

func TestCheckTexts(t *testing.T) {
	lim := Limits{Instances: 10, Cores: 20, RAM: 51200}
	cases := []struct {
		name      string
		used, req Usage
		want      string
	}{
		{"fits", Usage{9, 16, 0}, Usage{1, 4, 512}, ""},
		{"cores", Usage{5, 20, 0}, Usage{1, 4, 512}, "Quota exceeded for cores: Requested 4, but already used 20 of 20 cores"},
		{"two over", Usage{10, 20, 0}, Usage{1, 4, 512}, "Quota exceeded for instances, cores: Requested 1, 4, but already used 10, 20 of 10, 20 instances, cores"},
		{"ram", Usage{0, 0, 51000}, Usage{1, 1, 512}, "Quota exceeded for ram: Requested 512, but already used 51000 of 51200 ram"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(lim, c.used, c.req)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want || !errors.Is(err, ErrExceeded) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	if err := Check(Limits{Instances: -1, Cores: -1, RAM: -1}, Usage{1 << 40, 1 << 40, 1 << 40}, Usage{1, 1, 1}); err != nil {
		t.Fatalf("unlimited refused: %v", err)
	}
}

func TestFitAndCount(t *testing.T) {
	lim := Limits{Instances: 10, Cores: 8, RAM: -1}
	if n := Fit(lim, Usage{Cores: 2}, Usage{1, 2, 512}, 5); n != 3 {
		t.Fatalf("fit %d, want 3 (6 free cores, 2 each)", n)
	}
	ins := []records.Instance{
		{ProjectID: "p", Flavor: records.Flavor{VCPUs: 2, RAMMB: 512}},
		{ProjectID: "q", Flavor: records.Flavor{VCPUs: 8, RAMMB: 8192}},
		{ProjectID: "p", Flavor: records.Flavor{VCPUs: 1, RAMMB: 256}},
	}
	if u := Count(ins, "p"); u != (Usage{2, 3, 768}) {
		t.Fatalf("count %+v", u)
	}
}
