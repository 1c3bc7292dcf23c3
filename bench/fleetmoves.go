package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// moveSamples are the fleet client's boots and live migrations in a
// step's period.
type moveSamples struct {
	// bootPost is POST /servers's answer; bootClaim from that request
	// until the server shows its host: the scheduler's decision and the
	// claim committed (the agent's build comes after).
	bootPost, bootClaim []time.Duration
	// migPost is os-migrateLive's answer; migStart from that request
	// until its migration runs (the destination decided and claimed,
	// the copy begun) or has ended done.
	migPost, migStart []time.Duration
	failed            int
	firstErr          string // the first failure's
}

func (s *moveSamples) fail(err error) {
	s.failed++
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
}

// fleetMoves is what the moves client keeps across steps: how many
// servers it booted, and the last one (the next migration's).
type fleetMoves struct {
	flavor bool // fleetFlavor created
	booted int
	last   string
}

// fleetFlavor is the moves client's flavor (a fleet's server has none of
// its own): m1.tiny's size.
const fleetFlavor = "fleet.tiny"

// callMoves runs the moves client until ctx ends: every plan.MoveEvery
// it boots a server (fleetFlavor, no network) on the fleet's agents and
// live-migrates the one it booted before, each timed to its answer and
// to the server's decision. It is cheap: a boot and a migration every
// few seconds, each polled every 20 ms until decided.
func (g *fleetGen) callMoves(ctx context.Context) moveSamples {
	var s moveSamples
	c := newHTTPClient(g.srv.url, g.srv.token, "2.53")
	if !g.moves.flavor {
		st, err := c.do(ctx, "POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{
			"name": fleetFlavor, "id": fleetFlavor, "ram": 512, "vcpus": 1, "disk": 1}}, nil)
		if err != nil && st != http.StatusConflict {
			s.fail(fmt.Errorf("creating flavor %s: %w", fleetFlavor, err))
			return s
		}
		g.moves.flavor = true
	}
	t := time.NewTicker(g.plan.MoveEvery)
	defer t.Stop()
	for ctx.Err() == nil {
		prev := g.moves.last
		if err := g.bootOne(ctx, c, &s); err != nil && ctx.Err() == nil {
			s.fail(err)
		}
		if prev != "" && ctx.Err() == nil {
			if err := g.migrateOne(ctx, c, prev, &s); err != nil && ctx.Err() == nil {
				s.fail(err)
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return s
}

// bootOne boots a server and waits until it shows its host.
func (g *fleetGen) bootOne(ctx context.Context, c *httpClient, s *moveSamples) error {
	g.moves.booted++
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	t0 := time.Now()
	st, err := c.do(ctx, "POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
		"name": fmt.Sprintf("fleet-vm%d", g.moves.booted), "flavorRef": fleetFlavor, "networks": "none"}}, &out)
	if err != nil {
		if ctx.Err() != nil { // the period ended first: counted as long as it ran
			s.bootPost = cutShort(s.bootPost, time.Since(t0))
		}
		return err
	}
	if st != http.StatusAccepted {
		return fmt.Errorf("POST /servers: %d", st)
	}
	s.bootPost = append(s.bootPost, time.Since(t0))
	defer func() {
		if ctx.Err() != nil && g.moves.last != out.Server.ID { // undecided when the period ended
			s.bootClaim = cutShort(s.bootClaim, time.Since(t0))
		}
	}()
	path := "/compute/v2.1/servers/" + out.Server.ID
	for {
		var show struct {
			Server struct {
				Status string `json:"status"`
				Host   string `json:"OS-EXT-SRV-ATTR:host"`
			} `json:"server"`
		}
		if _, err := c.do(ctx, "GET", path, nil, &show); err != nil {
			return err
		}
		switch {
		case show.Server.Status == "ERROR":
			return fmt.Errorf("server %s went to ERROR", out.Server.ID)
		case show.Server.Host != "":
			s.bootClaim = append(s.bootClaim, time.Since(t0))
			g.moves.last = out.Server.ID
			return nil
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// migrateOne live-migrates server id, once it is ACTIVE, and waits until
// its migration runs or has ended.
func (g *fleetGen) migrateOne(ctx context.Context, c *httpClient, id string, s *moveSamples) error {
	for {
		var show struct {
			Server struct {
				Status string `json:"status"`
			} `json:"server"`
		}
		if _, err := c.do(ctx, "GET", "/compute/v2.1/servers/"+id, nil, &show); err != nil {
			return err
		}
		if show.Server.Status == "ACTIVE" {
			break
		}
		if show.Server.Status == "ERROR" {
			return fmt.Errorf("server %s went to ERROR", id)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	t0 := time.Now()
	st, err := c.do(ctx, "POST", "/compute/v2.1/servers/"+id+"/action",
		map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil)
	if err != nil {
		if ctx.Err() != nil {
			s.migPost = cutShort(s.migPost, time.Since(t0))
		}
		return err
	}
	if st != http.StatusAccepted {
		return fmt.Errorf("os-migrateLive of %s: %d", id, st)
	}
	s.migPost = append(s.migPost, time.Since(t0))
	started := false
	defer func() {
		if ctx.Err() != nil && !started { // not running when the period ended
			s.migStart = cutShort(s.migStart, time.Since(t0))
		}
	}()
	for {
		var out struct {
			Migrations []struct {
				Status string `json:"status"`
			} `json:"migrations"`
		}
		if _, err := c.do(ctx, "GET", "/compute/v2.1/os-migrations?migration_type=live-migration&instance_uuid="+id, nil, &out); err != nil {
			return err
		}
		for _, m := range out.Migrations {
			switch m.Status {
			case "running", "completed":
				s.migStart, started = append(s.migStart, time.Since(t0)), true
				return nil
			case "error", "failed":
				return fmt.Errorf("live migration of %s: %s", id, m.Status)
			}
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// cutShort is apiSamples.cutShort for the moves: a request the period's
// end cut short counts as long as it ran when that is longer than every
// answered one.
func cutShort(took []time.Duration, d time.Duration) []time.Duration {
	var s apiSamples
	return s.cutShort(took, d)
}
