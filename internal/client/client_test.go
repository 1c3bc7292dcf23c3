package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/client"
	"keel/internal/client/clienttest"
)

func TestCloudName(t *testing.T) {
	t.Setenv("OS_CLOUD", "")
	if got := client.CloudName(""); got != "keel" {
		t.Errorf("no flag, no env: %q", got)
	}
	t.Setenv("OS_CLOUD", "prod")
	if got := client.CloudName(""); got != "prod" {
		t.Errorf("env: %q", got)
	}
	if got := client.CloudName("lab"); got != "lab" {
		t.Errorf("flag over env: %q", got)
	}
}

func TestMemoryPercent(t *testing.T) {
	for _, tc := range []struct {
		m    client.Migration
		want int
	}{
		{client.Migration{}, 0},
		{client.Migration{MemoryTotalBytes: 200, MemoryProcessedBytes: 50}, 25},
		{client.Migration{MemoryTotalBytes: 100, MemoryProcessedBytes: 150}, 100},
	} {
		if got := tc.m.MemoryPercent(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.m, got, tc.want)
		}
	}
}

func TestConnectErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	_, err := client.Connect(ctx, client.Options{ConfigFile: filepath.Join(dir, "missing.yaml")})
	if !errors.Is(err, client.ErrNoCloudsYAML) || !strings.Contains(err.Error(), "run `keel dev`") || !strings.Contains(err.Error(), "--os-cloud") {
		t.Errorf("missing file: %v", err)
	}
	t.Setenv("OS_CLIENT_CONFIG_FILE", filepath.Join(dir, "also-missing.yaml"))
	if _, err := client.Connect(ctx, client.Options{}); !errors.Is(err, client.ErrNoCloudsYAML) || !strings.Contains(err.Error(), "also-missing.yaml") {
		t.Errorf("OS_CLIENT_CONFIG_FILE missing: %v", err)
	}

	file := filepath.Join(dir, "clouds.yaml")
	if err := client.WriteCloudsYAML(file, "http://127.0.0.1:1", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Connect(ctx, client.Options{ConfigFile: file, Cloud: "prod"}); err == nil || !strings.Contains(err.Error(), `cloud "prod" is not in`) {
		t.Errorf("unknown cloud: %v", err)
	}
	if _, err := client.Connect(ctx, client.Options{ConfigFile: file, Cloud: "keel"}); err == nil || !strings.Contains(err.Error(), "is keel running?") {
		t.Errorf("nobody listening: %v", err)
	}
}

// TestAgainstKeel exercises every call against a real keel.
func TestAgainstKeel(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	ctx := context.Background()

	// A wrong password is the API's 401, with its message.
	bad := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := client.WriteCloudsYAML(bad, cloud.Server.URL(), "wrong"); err != nil {
		t.Fatal(err)
	}
	_, err := client.Connect(ctx, client.Options{ConfigFile: bad, Cloud: "keel"})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Errorf("wrong password: %v", err)
	}

	c := cloud.Connect(t)
	if c.Microversion() != "2.30" || !strings.HasPrefix(c.ComputeEndpoint(), cloud.Server.URL()+"/compute/v2.1") || c.Cloud() != "keel" {
		t.Errorf("client: microversion %s, endpoint %s, cloud %s", c.Microversion(), c.ComputeEndpoint(), c.Cloud())
	}

	hosts, err := c.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
		if h.State != "up" || h.Status != "enabled" || h.VCPUs == 0 || h.MemoryMB == 0 || h.LocalGB == 0 {
			t.Errorf("host %+v", h)
		}
	}
	if !slices.Equal(names, cloud.Hosts) {
		t.Errorf("hosts %v, want %v", names, cloud.Hosts)
	}

	for _, ref := range []string{"2", "m1.small"} {
		if f, err := c.FindFlavor(ctx, ref); err != nil || f.ID != "2" || f.Name != "m1.small" || f.RAMMB != 2048 {
			t.Errorf("flavor %s: %+v %v", ref, f, err)
		}
	}
	if _, err := c.FindFlavor(ctx, "m9"); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "m1.tiny") {
		t.Errorf("unknown flavor: %v", err)
	}

	s, err := c.CreateServer(ctx, "web1", "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "web1" || s.FlavorName != "m1.small" || s.ID == "" {
		t.Errorf("created %+v", s)
	}
	s, err = c.WaitServer(ctx, s.ID, 50*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil || s.Status != "ACTIVE" || s.Host == "" || s.PowerState != "RUNNING" {
		t.Fatalf("after wait: %+v %v", s, err)
	}
	found, err := c.FindServer(ctx, "web1")
	if err != nil || found.ID != s.ID || found.FlavorName != "m1.small" {
		t.Errorf("find by name: %+v %v", found, err)
	}
	all, err := c.Servers(ctx, true)
	if err != nil || len(all) != 1 || all[0].ID != s.ID || all[0].FlavorName != "m1.small" {
		t.Errorf("servers: %+v %v", all, err)
	}

	dest := cloud.Hosts[0]
	if dest == s.Host {
		dest = cloud.Hosts[1]
	}
	w, err := c.LiveMigrate(ctx, s.ID, dest)
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	m, err := w.Wait(ctx, 50*time.Millisecond, func(m client.Migration) { statuses = append(statuses, m.Status) })
	if err != nil || m.Status != client.MigrationCompleted || m.Source != s.Host || m.Dest != dest || m.Type != "live-migration" {
		t.Fatalf("migration %+v %v", m, err)
	}
	if !slices.Contains(statuses, client.MigrationRunning) || statuses[len(statuses)-1] != client.MigrationCompleted {
		t.Errorf("statuses seen: %v", statuses)
	}
	if got, _ := c.GetServer(ctx, s.ID); got.Host != dest || got.Status != "ACTIVE" {
		t.Errorf("after migration: %+v", got)
	}
	if live, err := c.ServerMigrations(ctx, s.ID); err != nil || len(live) != 0 {
		t.Errorf("in-progress migrations after the end: %+v %v", live, err)
	}
	ms, err := c.Migrations(ctx, client.MigrationFilter{Host: dest, Status: "completed"})
	if err != nil || len(ms) != 1 || ms[0].ID != m.ID || ms[0].InstanceUUID != s.ID || ms[0].Updated.IsZero() {
		t.Errorf("migrations: %+v %v", ms, err)
	}

	// Moving to where it is is refused at once, with Nova's status and
	// text (UnableToMigrateToSelf: 400).
	_, err = c.LiveMigrate(ctx, s.ID, dest)
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(err.Error(), "to current host ("+dest+")") {
		t.Errorf("migrate to its own host: %v", err)
	}

	e, err := c.Explain(ctx, client.ExplainRequest{Flavor: "m1.small", IgnoreHosts: []string{dest}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Hosts) != 3 || e.Candidates != 2 || e.HostSubsetSize < 1 || e.Flavor.Name != "m1.small" {
		t.Errorf("explanation %+v", e)
	}
	for _, h := range e.Hosts {
		switch {
		case h.Host == dest && h.RejectedBy != "ignored":
			t.Errorf("%s not ignored: %+v", dest, h)
		case h.Host != dest && (h.Rank < 1 || len(h.Scores) == 0):
			t.Errorf("candidate %+v", h)
		}
	}
	if _, err := c.Explain(ctx, client.ExplainRequest{Flavor: "m9"}); !errors.As(err, &apiErr) || apiErr.Status != 400 {
		t.Errorf("explain of an unknown flavor: %v", err)
	}

	if v, err := c.Audit(ctx); err != nil || len(v) != 0 {
		t.Errorf("audit: %v %v", v, err)
	}

	if err := c.DeleteServer(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitServer(ctx, s.ID, 50*time.Millisecond, func(s client.Server) bool { return s.Status == "DELETED" }); err != nil {
		t.Errorf("wait for delete: %+v %v", got, err)
	}
	if _, err := c.FindServer(ctx, s.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deleted server: %v", err)
	}
}
