package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gophercloud/gophercloud/v2"

	"keel/internal/scheduler"
)

// AuditFinding is one violation the audit found: its kind (see package
// audit), what it is about and the line to show.
type AuditFinding struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// AuditReport is the audit's answer: the findings, and what could not be
// checked (a host down, slots not exposed).
type AuditReport struct {
	Findings  []AuditFinding `json:"findings"`
	Unchecked []string       `json:"unchecked"`
}

// Audit runs keel's consistency audit (GET /keel/v1/audit, admin): one
// line per violated invariant; none means the cloud is consistent.
func (c *Client) Audit(ctx context.Context) ([]string, error) {
	r, err := c.AuditReport(ctx)
	if err != nil {
		return nil, err
	}
	var v []string
	for _, f := range r.Findings {
		v = append(v, f.Text)
	}
	return v, nil
}

// AuditReport runs the audit and returns its whole answer.
func (c *Client) AuditReport(ctx context.Context) (AuditReport, error) {
	var body AuditReport
	if _, err := c.keel.Get(ctx, c.keel.ServiceURL("audit"), &body, nil); err != nil {
		return AuditReport{}, fmt.Errorf("keel audit: %w", describe(err))
	}
	return body, nil
}

// ResetMigration ends a stuck migration (POST /keel/v1/migrations/ID/reset,
// admin): the conductor ends it through its machine, reverting the
// allocations and the destination, and returns the final record.
func (c *Client) ResetMigration(ctx context.Context, id int64) (Migration, error) {
	var body struct {
		Migration rawMigration `json:"migration"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("migrations", strconv.FormatInt(id, 10), "reset"), map[string]any{}, &body, &gophercloud.RequestOpts{OkCodes: []int{200}})
	if err != nil {
		err = describe(err)
		var ae *APIError
		switch {
		case errors.Is(err, ErrNotFound):
			return Migration{}, fmt.Errorf("migration %d: %w (keel migration list shows them)", id, ErrNotFound)
		case errors.As(err, &ae) && ae.Status == http.StatusConflict:
			return Migration{}, err // the server's message names the migration
		}
		return Migration{}, fmt.Errorf("resetting migration %d: %w", id, err)
	}
	return newestFirst([]rawMigration{body.Migration})[0], nil
}

// ExplainRequest asks the scheduler about a boot of Flavor (id or name):
// IgnoreHosts are excluded as a live migration excludes its source; Host,
// if set, is the one host to check. PickSeed, if not 0, is a past
// decision's pick seed (the pick_seed of the server's "scheduled" log
// line): Explanation.Picked is then the host that seed picks.
type ExplainRequest struct {
	Flavor      string   `json:"flavor"`
	IgnoreHosts []string `json:"ignore_hosts"`
	Host        string   `json:"host"`
	PickSeed    uint64   `json:"pick_seed,omitempty"`
}

// WeigherScore and HostExplanation are the scheduler's own types, as the
// explain endpoint serialises them.
type (
	WeigherScore    = scheduler.WeigherScore
	HostExplanation = scheduler.HostExplanation
)

// Explanation is the scheduler's answer: every host, the number of
// candidates, and host_subset_size (the decision picks at random among
// the first that many candidates).
type Explanation struct {
	Flavor         Flavor            `json:"flavor"`
	Hosts          []HostExplanation `json:"hosts"`
	Candidates     int               `json:"candidates"`
	HostSubsetSize int               `json:"host_subset_size"`
	// Picked is the host the decision takes first: the best candidate
	// when host_subset_size is 1, else the one ExplainRequest.PickSeed
	// picks ("" without a seed).
	Picked string `json:"picked,omitempty"`
}

// Explain asks keel's scheduler where a request would go, without
// claiming anything (POST /keel/v1/schedule/explain, admin).
func (c *Client) Explain(ctx context.Context, req ExplainRequest) (Explanation, error) {
	if req.IgnoreHosts == nil {
		req.IgnoreHosts = []string{}
	}
	var body struct {
		Flavor      Flavor `json:"flavor"`
		Explanation struct {
			Hosts          []HostExplanation `json:"hosts"`
			Candidates     int               `json:"candidates"`
			HostSubsetSize int               `json:"host_subset_size"`
			Picked         string            `json:"picked"`
		} `json:"explanation"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("schedule", "explain"), req, &body, &gophercloud.RequestOpts{OkCodes: []int{200}})
	if err != nil {
		return Explanation{}, fmt.Errorf("explaining a boot of flavor %s: %w", req.Flavor, describe(err))
	}
	e := body.Explanation
	return Explanation{Flavor: body.Flavor, Hosts: e.Hosts, Candidates: e.Candidates, HostSubsetSize: e.HostSubsetSize, Picked: e.Picked}, nil
}
