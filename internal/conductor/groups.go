package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"keel/internal/flow"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// placer is what scheduling a boot or a move needs besides the
// scheduler: the request built from the instance's hints, the server
// group's lock and membership (its late check, its members' quota), and
// the decision told to the log and the Decision hook.
type placer struct {
	store    Store
	quota    Admission    // nil admits all
	flows    *flow.Driver // its lock map holds the group locks
	log      *slog.Logger
	decision func(kind string, inst records.Instance, sel scheduler.Selection, err error)
}

// request builds the scheduler request for an instance: its flavor, and
// what its scheduler hints ask — the server group's policy with where its
// other members are, and the hosts of the instances named by same_host and
// different_host (as Nova's conductor fills the RequestSpec).
func (p *placer) request(ctx context.Context, inst records.Instance) (*scheduler.Request, error) {
	req := requestFor(inst)
	h := inst.Hints
	if h == nil {
		return req, nil
	}
	if h.Group != "" {
		g, err := p.store.GetServerGroup(ctx, h.Group)
		switch {
		case isNotFound(err):
			// The group was deleted: nothing left to keep together or apart.
		case err != nil:
			return nil, fmt.Errorf("reading server group %s of %s: %w", h.Group, inst.UUID, err)
		default:
			sg := &scheduler.Group{Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost, Members: map[string]int{}}
			for _, m := range g.Members {
				if m == inst.UUID {
					continue
				}
				host, err := p.hostOf(ctx, m)
				if err != nil {
					return nil, err
				}
				if host != "" {
					sg.Members[host]++
				}
			}
			req.Group = sg
		}
	}
	var err error
	if h.SameHost != nil {
		if req.SameHost, err = p.hostsOf(ctx, h.SameHost); err != nil {
			return nil, err
		}
	}
	if h.DifferentHost != nil {
		if req.DifferentHost, err = p.hostsOf(ctx, h.DifferentHost); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// hostOf returns an instance's host ("" if it has none or is gone).
func (p *placer) hostOf(ctx context.Context, uuid string) (string, error) {
	in, err := p.store.GetInstance(ctx, uuid)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading instance %s: %w", uuid, err)
	}
	return in.Host, nil
}

// hostsOf returns the hosts of the named instances, each once; never nil
// (a hint naming only instances without a host passes no host).
func (p *placer) hostsOf(ctx context.Context, uuids []string) ([]string, error) {
	out := []string{}
	for _, u := range uuids {
		h, err := p.hostOf(ctx, u)
		if err != nil {
			return nil, err
		}
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// groupLock serialises the scheduling of one server group's members in
// this process, so two boots in an anti-affinity group cannot both pick a
// host before either has recorded it. It returns the unlock function,
// which may be called more than once (a no-op for an instance in no
// group).
func (p *placer) groupLock(inst records.Instance) func() {
	if inst.Hints == nil || inst.Hints.Group == "" {
		return func() {}
	}
	return sync.OnceFunc(p.flows.Lock(groupKey(inst.Hints.Group)))
}

// joinGroup adds a new instance to its server group's members.
func (p *placer) joinGroup(ctx context.Context, inst records.Instance) error {
	if inst.Hints == nil || inst.Hints.Group == "" {
		return nil
	}
	limit := int64(-1)
	if p.quota != nil {
		var err error
		if limit, err = p.quota.GroupMembersLimit(ctx, inst.ProjectID); err != nil {
			return fmt.Errorf("adding %s to server group %s: %w", inst.UUID, inst.Hints.Group, err)
		}
	}
	_, err := p.store.UpdateServerGroup(ctx, inst.Hints.Group, func(g *records.ServerGroup) error {
		if !slices.Contains(g.Members, inst.UUID) {
			// Checked inside the versioned update: two joins racing for
			// the last place cannot both have it.
			if limit >= 0 && int64(len(g.Members)) >= limit {
				return quota.GroupMembersExceeded()
			}
			g.Members = append(g.Members, inst.UUID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding %s to server group %s: %w", inst.UUID, inst.Hints.Group, err)
	}
	return nil
}

// leaveGroup removes an instance that failed to build or was deleted from
// its server group's members; a group deleted meanwhile is fine.
func (p *placer) leaveGroup(ctx context.Context, inst records.Instance) {
	if inst.Hints == nil || inst.Hints.Group == "" {
		return
	}
	_, err := p.store.UpdateServerGroup(ctx, inst.Hints.Group, func(g *records.ServerGroup) error {
		g.Members = slices.DeleteFunc(g.Members, func(m string) bool { return m == inst.UUID })
		return nil
	})
	if err != nil && !isNotFound(err) {
		p.log.Warn("removing an instance from its server group", "instance", inst.UUID, "group", inst.Hints.Group, "err", err)
	}
}

// lateCheckAttempts bounds how often a boot schedules again after the late
// check found its host no longer allowed.
const lateCheckAttempts = 3

// errGroupMoved: a member of the group was placed between reading where
// the members are and confirming.
var errGroupMoved = errors.New("server group placements moved on")

// confirmGroup is the late check of a hard server group policy, made after
// the instance's host is recorded: it reads the group's placement count,
// then where the other members are, checks the policy still allows the
// host, and bumps the count with a versioned update of the group. Two
// members placed at once by different keel servers are thereby ordered:
// the second to confirm re-reads after the first's host was recorded and
// sees it (the groupLock only orders boots within one process). It
// returns false when the policy no longer allows the host.
func (p *placer) confirmGroup(ctx context.Context, inst records.Instance) (bool, error) {
	if inst.Hints == nil || inst.Hints.Group == "" {
		return true, nil
	}
	for {
		g, err := p.store.GetServerGroup(ctx, inst.Hints.Group)
		if isNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading server group %s of %s: %w", inst.Hints.Group, inst.UUID, err)
		}
		if g.Policy != "affinity" && g.Policy != "anti-affinity" {
			return true, nil // soft policies only weigh
		}
		seen := g.Placements
		req, err := p.request(ctx, inst)
		if err != nil {
			return false, err
		}
		if req.Group != nil && !req.Group.Allows(inst.Host) {
			return false, nil
		}
		_, err = p.store.UpdateServerGroup(ctx, g.UUID, func(g *records.ServerGroup) error {
			if g.Placements != seen {
				return errGroupMoved
			}
			g.Placements++
			return nil
		})
		switch {
		case errors.Is(err, errGroupMoved):
			continue
		case isNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("confirming %s's place in server group %s: %w", inst.UUID, g.UUID, err)
		}
		return true, nil
	}
}
