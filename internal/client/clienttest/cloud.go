// Package clienttest runs a real keel in-process for tests: a server on
// 127.0.0.1 (SQLite and an embedded bus in a temporary directory), N
// fake-driver agents as real bus peers, flavors, and a clouds.yaml that
// logs in as admin — the cloud `keel dev` runs, minus the process.
package clienttest

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/agent"
	"keel/internal/client"
	"keel/internal/compute/fake"
	"keel/internal/config"
	"keel/internal/identity"
	"keel/internal/records"
	"keel/internal/server"
)

// Flavors are the flavors Start creates unless Options.Flavors is set
// (keel dev's m1 set, up to m1.large).
var Flavors = []records.Flavor{
	{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1},
	{ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
	{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40},
	{ID: "4", Name: "m1.large", VCPUs: 4, RAMMB: 8192, DiskGB: 80},
}

// Options configure the cloud.
type Options struct {
	// Hosts is the number of agents (h01, h02, …); 0 means 3.
	Hosts int
	// Flavors to create; nil means Flavors.
	Flavors []records.Flavor
	// Config, if set, adjusts the configuration (config.Default() with the
	// data dir and listen addresses already set) before the server starts.
	Config func(*config.Config)
	// Log, if set, receives the server's and agents' log (text, debug
	// level) besides KEEL_TEST_LOG's stderr.
	Log io.Writer
}

// Cloud is a running keel.
type Cloud struct {
	Server     *server.Server
	Config     config.Config
	DataDir    string
	CloudsYAML string // DataDir/clouds.yaml, cloud client.DefaultCloud
	Password   string // the admin password
	// Passwords are every user's password by name: admin, demo, alt_demo
	// (keel dev's users; clouds keel, keel-demo and keel-alt_demo).
	Passwords map[string]string
	Hosts     []string
	agents    []*agent.Agent
}

// Start runs a cloud until the test ends. Set KEEL_TEST_LOG=1 to see its
// log on stderr.
func Start(t testing.TB, opts Options) *Cloud {
	t.Helper()
	if opts.Hosts == 0 {
		opts.Hosts = 3
	}
	if opts.Flavors == nil {
		opts.Flavors = Flavors
	}
	var out io.Writer = io.Discard
	if os.Getenv("KEEL_TEST_LOG") != "" {
		out = os.Stderr
	}
	if opts.Log != nil {
		out = io.MultiWriter(out, opts.Log)
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))

	dir := t.TempDir()
	cfg := config.Default()
	cfg.Keel.DataDir = dir
	cfg.Keel.Listen = "127.0.0.1:0"
	cfg.Keel.NATSListen = "127.0.0.1:0" // the bus package picks a free port for 0
	if opts.Config != nil {
		opts.Config(&cfg)
	}
	passwords, err := server.EnsureDevUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	password := passwords["admin"]
	if err := cheapenPasswords(dir, passwords); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cloud{Config: cfg, DataDir: dir, Password: password, Passwords: passwords, CloudsYAML: filepath.Join(dir, "clouds.yaml")}
	t.Cleanup(func() {
		for _, a := range c.agents {
			a.Stop()
		}
		if c.Server != nil {
			c.Server.Close()
		}
		cancel()
	})
	if c.Server, err = server.Start(ctx, cfg, log); err != nil {
		t.Fatalf("starting keel server: %v", err)
	}
	for _, f := range opts.Flavors {
		if _, err := c.Server.Store().CreateFlavor(ctx, f); err != nil {
			t.Fatalf("creating flavor %s: %v", f.Name, err)
		}
	}
	for i := 1; i <= opts.Hosts; i++ {
		host := fmt.Sprintf("h%02d", i)
		hw := cfg.HostConfig("")
		hw.Host = host
		a, err := agent.Start(ctx, agent.Options{
			Host: host, DataDir: filepath.Join(dir, "agents", host), BusURL: c.Server.BusURL(), Creds: c.Server.Credentials(),
			Hardware:                hw,
			UpdateResourcesInterval: time.Duration(cfg.Default.UpdateResourcesInterval) * time.Second,
			ReportInterval:          cfg.Default.ReportInterval,
			SpawnTime:               cfg.Keel.FakeSpawnTime,
			StepTime:                cfg.Keel.FakeStepTime,
			BandwidthMiBps:          float64(cfg.Libvirt.LiveMigrationBandwidth),
			Workload:                cfg.Keel.FakeWorkload, // measured usage as keel dev's agents
			Metrics:                 cfg.Metrics.MetricsConfig(),
			Log:                     log,
		})
		if err != nil {
			t.Fatalf("starting agent %s: %v", host, err)
		}
		c.agents = append(c.agents, a)
		c.Hosts = append(c.Hosts, host)
	}
	var members []client.Account
	for _, u := range server.DevUsers {
		members = append(members, client.Account{Cloud: "keel-" + u, User: u, Password: passwords[u]})
	}
	if err := client.WriteCloudsYAML(c.CloudsYAML, c.Server.URL(), password, members...); err != nil {
		t.Fatal(err)
	}
	return c
}

// Connect logs in to the cloud as admin.
func (c *Cloud) Connect(t testing.TB) *client.Client {
	t.Helper()
	cl, err := client.Connect(context.Background(), client.Options{Cloud: client.DefaultCloud, ConfigFile: c.CloudsYAML})
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	return cl
}

// FailNext makes host's fake driver fail the next call of step (one of
// compute.Step*) for instance uuid ("" for any) with msg.
func (c *Cloud) FailNext(t testing.TB, host, step, uuid, msg string) {
	t.Helper()
	for i, h := range c.Hosts {
		if h == host {
			c.agents[i].Manager().Driver().(*fake.Driver).FailNext(step, uuid, msg)
			return
		}
	}
	t.Fatalf("no host %s in %v", host, c.Hosts)
}

// Driver is host's fake driver (to make a guest vanish or appear).
func (c *Cloud) Driver(t testing.TB, host string) *fake.Driver {
	t.Helper()
	for i, h := range c.Hosts {
		if h == host {
			return c.agents[i].Manager().Driver().(*fake.Driver)
		}
	}
	t.Fatalf("no host %s in %v", host, c.Hosts)
	return nil
}

// cheapenPasswords rewrites the users' password hashes with few PBKDF2
// iterations: every command logs in, and 600 000 iterations take about a
// second a login under the race detector.
func cheapenPasswords(dataDir string, passwords map[string]string) error {
	path := filepath.Join(dataDir, "identity.json")
	d, err := identity.LoadDirectory(path)
	if err != nil {
		return err
	}
	const iterations = 1000
	enc := base64.RawStdEncoding
	for i := range d.Users {
		password := passwords[d.Users[i].Name]
		salt := make([]byte, 16)
		if _, err := rand.Read(salt); err != nil {
			return err
		}
		key, err := pbkdf2.Key(sha256.New, password, salt, iterations, 32)
		if err != nil {
			return err
		}
		hash := fmt.Sprintf("$pbkdf2-sha256$%d$%s$%s", iterations, enc.EncodeToString(salt), enc.EncodeToString(key))
		if ok, err := identity.CheckPassword(hash, password); err != nil || !ok {
			return fmt.Errorf("cheap password hash not accepted by identity.CheckPassword (%v): has the hash format changed?", err)
		}
		d.Users[i].PasswordHash = hash
	}
	return d.Save(path)
}
