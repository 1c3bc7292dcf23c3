package scheduler

import (
	"context"
	"strings"
	"testing"
)

// TestTraitSpecsSelectByProviderTraits: a flavor's (or image's)
// trait:NAME=required|forbidden picks hosts by their providers' traits,
// as Nova's placement query does, and Explain says why a host lacks one.
func TestTraitSpecsSelectByProviderTraits(t *testing.T) {
	c := newCloud(t, 3)
	ctx := context.Background()
	for host, traits := range map[string][]string{"h01": {"HW_CPU_X86_AVX2"}, "h02": {"HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED"}} {
		p, err := c.st.GetProvider(ctx, "rp-"+host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.st.SetProviderTraits(ctx, p.UUID, p.Generation, traits); err != nil {
			t.Fatal(err)
		}
	}
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	passing := func(req *Request) string {
		t.Helper()
		exp, err := s.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range exp.Hosts {
			if h.RejectedBy == "" {
				out = append(out, h.Host)
			} else if h.RejectedBy == "ResourceFilter" && !strings.Contains(h.Reason, "trait") {
				t.Errorf("%s rejected for %q, want a reason naming the trait", h.Host, h.Reason)
			}
		}
		return strings.Join(out, ",")
	}
	cases := []struct {
		name        string
		specs, imgs map[string]string
		want        string
	}{
		{"none", nil, nil, "h01,h02,h03"},
		{"required", map[string]string{"trait:HW_CPU_X86_AVX2": "required"}, nil, "h01,h02"},
		{"required and forbidden", map[string]string{"trait:HW_CPU_X86_AVX2": "required", "trait:COMPUTE_STATUS_DISABLED": "forbidden"}, nil, "h01"},
		{"from the image", nil, map[string]string{"trait:COMPUTE_STATUS_DISABLED": "required"}, "h02"},
		{"the flavor wins", map[string]string{"trait:HW_CPU_X86_AVX2": "forbidden"}, map[string]string{"trait:HW_CPU_X86_AVX2": "required"}, "h03"},
		{"other values are ignored", map[string]string{"trait:HW_CPU_X86_AVX2": "preferred"}, nil, "h01,h02,h03"},
	}
	for _, tc := range cases {
		if got := passing(&Request{Resources: small(), ExtraSpecs: tc.specs, ImageProps: tc.imgs}); got != tc.want {
			t.Errorf("%s: hosts %q, want %q", tc.name, got, tc.want)
		}
	}
	// Select takes the same path as Explain.
	req := &Request{Resources: small(), ExtraSpecs: map[string]string{"trait:COMPUTE_STATUS_DISABLED": "required"}}
	got, err := s.Select(ctx, req, storeClaim(c.st, "vm", small()))
	if err != nil || got.Host != "h02" {
		t.Fatalf("Select with a required trait: %+v %v, want h02", got, err)
	}
}
