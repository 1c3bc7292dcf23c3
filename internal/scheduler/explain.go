package scheduler

import (
	"context"
	"sort"
)

// WeigherScore is one weigher's contribution to a host's weight.
type WeigherScore struct {
	Weigher    string  `json:"weigher"`
	Raw        float64 `json:"raw"`
	Normalized float64 `json:"normalized"`
	Multiplier float64 `json:"multiplier"`
	Weighted   float64 `json:"weighted"`
	// Inputs are MetricsWeigher's: each weighed metric with its value
	// and age.
	Inputs []MetricInput `json:"inputs,omitempty"`
}

// HostExplanation is one host's fate in a decision.
type HostExplanation struct {
	Host string `json:"host"`
	// RejectedBy names the filter that rejected the host ("ignored" for a
	// host the request excludes); empty for a candidate.
	RejectedBy string         `json:"rejected_by,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Weight     float64        `json:"weight"`
	Rank       int            `json:"rank,omitempty"` // 1 = best; candidates only
	Scores     []WeigherScore `json:"scores,omitempty"`
}

// Explanation lists every host for one request: rejected ones with the
// filter and reason, candidates by rank with each weigher's raw,
// normalised and weighted value.
type Explanation struct {
	Hosts      []HostExplanation `json:"hosts"`
	Candidates int               `json:"candidates"`
	// SubsetSize is host_subset_size: the decision picks at random among
	// the first SubsetSize candidates.
	SubsetSize int `json:"host_subset_size"`
	// Picked is the candidate the decision takes first: the best one when
	// there is nothing to pick among, else the one Request.PickSeed picks
	// (empty without a seed). With Selection.PickSeed of a past decision,
	// on the same view, it is the host that decision claimed first
	// (shuffle_best_same_weighed_hosts aside: Explain does not shuffle).
	Picked string `json:"picked,omitempty"`
}

// Explain runs the filters and weighers for req without claiming. It is
// the reference semantics the fast path (Select) is held to: every
// filter's Fits asked on every host, every weigher's raw value read from
// the HostState through the registry and normalised on its own, a stable
// sort by weight over the hosts in name order. TestSelectRanksLikeExplain,
// TestFastPathAgreesWithExplain and TestNovaDifferential hold Select to
// it.
func (s *Scheduler) Explain(ctx context.Context, req *Request) (Explanation, error) {
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshLocked(ctx); err != nil {
		return Explanation{}, err
	}
	hosts := v.snapshot()
	s.prepareMetrics(req)
	req.prepare(s.clock.Now())
	v.dense.refreshMetrics(hosts, req.now)
	if req.queryErr != nil {
		return Explanation{}, &NoValidHostError{Hosts: len(hosts), Reason: req.queryErr.Error()}
	}
	s.prepareTree(req)
	exp := Explanation{SubsetSize: s.cfg.HostSubsetSize}
	var cands []int32
	var candRows []int
	for i, h := range hosts {
		row := HostExplanation{Host: h.Name}
		switch {
		case req.ignored(h.Name):
			row.RejectedBy, row.Reason = "ignored", "excluded by the request (source or already tried, or not the requested host)"
		case req.Force && req.RequestedHost == h.Name:
		default:
			for _, f := range s.filters {
				if f.Active(req) && !f.Fits(h, req) {
					row.RejectedBy, row.Reason = f.Name(), f.Why(h, req)
					break
				}
			}
		}
		exp.Hosts = append(exp.Hosts, row)
		if row.RejectedBy == "" {
			cands = append(cands, int32(i))
			candRows = append(candRows, len(exp.Hosts)-1)
		}
	}
	s.weigh(hosts, cands, req, func(i int, w string, raw, norm, mult float64) {
		r := &exp.Hosts[candRows[i]]
		sc := WeigherScore{Weigher: w, Raw: raw, Normalized: norm, Multiplier: mult, Weighted: norm * mult}
		if w == metricsWeigherName {
			sc.Inputs = s.metricInputs(hosts[cands[i]], req.now)
		}
		r.Scores = append(r.Scores, sc)
	})
	if req.metricErr != nil {
		return exp, req.metricErr
	}
	for i, row := range candRows {
		exp.Hosts[row].Weight = s.totals[i]
	}
	ranked := append([]int(nil), candRows...)
	sort.SliceStable(ranked, func(a, b int) bool { return exp.Hosts[ranked[a]].Weight > exp.Hosts[ranked[b]].Weight })
	for rank, row := range ranked {
		exp.Hosts[row].Rank = rank + 1
	}
	exp.Candidates = len(cands)
	if subset := min(s.cfg.HostSubsetSize, len(ranked)); subset == 1 {
		exp.Picked = exp.Hosts[ranked[0]].Host
	} else if subset > 1 && req.PickSeed != 0 {
		exp.Picked = exp.Hosts[ranked[pickIndex(req.PickSeed, subset)]].Host
	}
	return exp, nil
}
