package e2e

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestAnswersDoNotWaitOnAgents: a boot onto a host whose agent is
// stopped (SIGSTOP: silent until its calls time out) and a live migration
// onto it (microversion 2.34, whose pre-checks are asynchronous) are
// answered 202 at once — the requests write their intent and the store
// decides the rest, the agent calls go on behind them — rather than after
// the agent answers (up to rpc_timeout, here 20 s). The agent is resumed
// once both answered, or after 6 s without an answer; both then finish.
// Before, each request waited for the agent: answered only once it was
// resumed (6 s).
func TestAnswersDoNotWaitOnAgents(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "keel.rpc_timeout=20")
	moved := c.bootAt("moved", "1", "h1")
	c.signal("h2", syscall.SIGSTOP)
	type answer struct {
		what   string
		status int
		body   []byte
		took   time.Duration
	}
	answers := make(chan answer, 2)
	send := func(what, path, version string, body any) {
		start := time.Now()
		st, data := c.send("POST", path, version, body)
		answers <- answer{what, st, data, time.Since(start)}
	}
	go send("boot", "/compute/v2.1/servers", "compute 2.30",
		map[string]any{"server": map[string]any{"name": "booted", "flavorRef": "1", "networks": "none", "availability_zone": "nova:h2"}})
	go send("live migration", "/compute/v2.1/servers/"+moved+"/action", "compute 2.34",
		map[string]any{"os-migrateLive": map[string]any{"host": "h2", "block_migration": "auto"}})
	got := map[string]answer{}
	resumed := false
	timeout := time.After(6 * time.Second)
	for len(got) < 2 {
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
	for _, a := range got {
		t.Logf("%s answered %d in %s", a.what, a.status, a.took.Round(time.Millisecond))
		if a.status != 202 {
			t.Fatalf("%s: %d %s", a.what, a.status, a.body)
		}
	}
	if resumed {
		t.Fatalf("a request waited on the stopped agent: boot %s, live migration %s",
			got["boot"].took.Round(time.Millisecond), got["live migration"].took.Round(time.Millisecond))
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
}
