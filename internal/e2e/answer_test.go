package e2e

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestAnswersDoNotWaitOnAgents: requests whose first agent call goes to a
// host whose agent is stopped (SIGSTOP: silent until its calls time out)
// — a boot onto it, a live migration onto it (microversion 2.34, whose
// pre-checks are asynchronous), a cold migration onto it (2.56), a resize
// (the only other host up) and an evacuation onto it — are answered at
// once (202; the evacuation 200) — the requests write their intent and the
// store decides the rest (checks, schedule and claim), the agent calls go
// on behind them — rather than after the agent answers (up to
// rpc_timeout, here 20 s). The agent is resumed once all answered, or
// after 6 s without every answer; all then finish. Before, each request
// waited for the agent: answered only once it was resumed (6 s).
func TestAnswersDoNotWaitOnAgents(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 3, "keel.rpc_timeout=20")
	moved := c.bootAt("moved", "1", "h1")
	cold := c.bootAt("cold", "1", "h1")
	resized := c.bootAt("resized", "1", "h1")
	evacuated := c.bootAt("evacuated", "1", "h3")
	// The evacuation's source is down (and the scheduler skips it: the
	// resize's only candidate is h2).
	c.agents["h3"].kill()
	c.forceDown("h3", true)
	c.signal("h2", syscall.SIGSTOP)
	type answer struct {
		what   string
		status int
		body   []byte
		took   time.Duration
	}
	action := func(id string) string { return "/compute/v2.1/servers/" + id + "/action" }
	requests := []struct {
		what, path, version string
		body                map[string]any
		want                int
	}{
		{"boot", "/compute/v2.1/servers", "compute 2.30",
			map[string]any{"server": map[string]any{"name": "booted", "flavorRef": "1", "networks": "none", "availability_zone": "nova:h2"}}, 202},
		{"live migration", action(moved), "compute 2.34",
			map[string]any{"os-migrateLive": map[string]any{"host": "h2", "block_migration": "auto"}}, 202},
		{"cold migration", action(cold), "compute 2.56", map[string]any{"migrate": map[string]any{"host": "h2"}}, 202},
		{"resize", action(resized), "compute 2.30", map[string]any{"resize": map[string]any{"flavorRef": "2"}}, 202},
		{"evacuation", action(evacuated), "compute 2.30", map[string]any{"evacuate": map[string]any{"host": "h2"}}, 200},
	}
	answers := make(chan answer, len(requests))
	for _, r := range requests {
		go func() {
			start := time.Now()
			st, data := c.send("POST", r.path, r.version, r.body)
			answers <- answer{r.what, st, data, time.Since(start)}
		}()
	}
	got := map[string]answer{}
	resumed := false
	timeout := time.After(6 * time.Second)
	for len(got) < len(requests) {
		select {
		case a := <-answers:
			got[a.what] = a
		case <-timeout:
			c.signal("h2", syscall.SIGCONT)
			resumed = true
		}
	}
	if !resumed {
		c.signal("h2", syscall.SIGCONT)
	}
	for _, r := range requests {
		a := got[r.what]
		t.Logf("%s answered %d in %s", a.what, a.status, a.took.Round(time.Millisecond))
		if a.status != r.want {
			t.Fatalf("%s: %d %s, want %d", a.what, a.status, a.body, r.want)
		}
	}
	if resumed {
		took := ""
		for _, r := range requests {
			took += fmt.Sprintf(" %s %s", r.what, got[r.what].took.Round(time.Millisecond))
		}
		t.Fatalf("a request waited on the stopped agent:%s", took)
	}
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	if err := json.Unmarshal(got["boot"].body, &out); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the boot ACTIVE on h2", 60*time.Second, func() bool {
		s := c.server_(out.Server.ID)
		return s["status"] == "ACTIVE" && s["OS-EXT-SRV-ATTR:host"] == "h2"
	})
	c.waitFor("the live migration done", 60*time.Second, func() bool { return c.hostOf(moved) == "h2" })
	if st := c.server_(moved)["status"]; st != "ACTIVE" {
		t.Fatalf("the moved server is %v, want ACTIVE", fmt.Sprint(st))
	}
	for _, id := range []string{cold, resized} {
		c.waitFor("the cold move of "+id+" waiting for its confirmation on h2", 60*time.Second, func() bool {
			s := c.server_(id)
			return s["status"] == "VERIFY_RESIZE" && s["OS-EXT-SRV-ATTR:host"] == "h2"
		})
	}
	c.waitFor("the evacuation ACTIVE on h2", 60*time.Second, func() bool {
		s := c.server_(evacuated)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && s["OS-EXT-SRV-ATTR:host"] == "h2"
	})
}
