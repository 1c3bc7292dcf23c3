package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"keel/internal/agent"
	"keel/internal/config"
	"keel/internal/records"
	"keel/internal/server"
	"keel/internal/store"
)

// httpClient calls an OpenStack-style API with a token.
type httpClient struct {
	base    string
	token   string
	version string // the OpenStack-API-Version header, if any
	hc      *http.Client
}

func newHTTPClient(base, token, version string) *httpClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &httpClient{base: base, token: token, version: version, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// do sends a request and reads the whole answer; out, if not nil, gets
// the decoded body. It returns the status.
func (c *httpClient) do(ctx context.Context, method, path string, body, out any) (int, error) {
	status, data, err := c.raw(ctx, method, path, body)
	if err != nil {
		return status, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return status, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return status, nil
}

// raw sends a request and returns the status and the whole body, read
// but not decoded; a status of 300 or more is an error.
func (c *httpClient) raw(ctx context.Context, method, path string, body any) (int, []byte, error) {
	return c.rawInto(ctx, method, path, body, nil)
}

// rawInto is raw reading the body into buf's storage when it is large
// enough (its length is ignored), else into a new buffer of the announced
// size: a client that times many large answers reads each into the same
// memory, as a client that cares would, instead of allocating (and
// clearing, and later collecting) a megabyte per answer.
func (c *httpClient) rawInto(ctx context.Context, method, path string, body any, buf []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("X-Auth-Token", c.token)
	if c.version != "" {
		req.Header.Set("OpenStack-API-Version", c.version)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	// Read into one buffer of the announced size, not one grown by
	// doubling (ReadFrom wants bytes.MinRead free at the end).
	if need := max(resp.ContentLength, 0) + bytes.MinRead; int64(cap(buf)) < need {
		buf = make([]byte, 0, need)
	}
	got := bytes.NewBuffer(buf[:0])
	if _, err := got.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	data := got.Bytes()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, data, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data[:min(len(data), 300)])))
	}
	return resp.StatusCode, data, nil
}

// keelServer is one in-process keel server on SQLite in a temporary data
// dir, with an admin token.
type keelServer struct {
	srv    *server.Server
	cfg    config.Config
	dir    string
	token  string
	agents []*agent.Agent
	cancel context.CancelFunc
}

// startKeel starts a keel server (SQLite store, embedded NATS) on a free
// loopback port and logs in as admin. adjust, if not nil, changes the
// configuration first.
func startKeel(ctx context.Context, adjust func(*config.Config)) (_ *keelServer, err error) {
	dir, err := os.MkdirTemp("", "keelbench-keel-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	cfg := config.Default()
	cfg.Keel.DataDir = dir
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	cfg.Keel.Listen = l.Addr().String()
	l.Close()
	cfg.Keel.NATSListen = "127.0.0.1:0"
	if adjust != nil {
		adjust(&cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &keelServer{cfg: cfg, dir: dir, cancel: cancel}
	defer func() {
		if err != nil {
			k.stop()
		}
	}()
	if k.srv, err = server.Start(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
		return nil, fmt.Errorf("starting keel server: %w", err)
	}
	pw, err := os.ReadFile(filepath.Join(dir, "admin-password"))
	if err != nil {
		return nil, fmt.Errorf("reading the admin password: %w", err)
	}
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":%q}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}`, string(pw))
	req, err := http.NewRequestWithContext(ctx, "POST", k.srv.URL()+"/identity/v3/auth/tokens", strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("login: status %d", resp.StatusCode)
	}
	k.token = resp.Header.Get("X-Subject-Token")
	return k, nil
}

// addAgents starts n fake-driver agents (h0001…) as real bus peers.
func (k *keelServer) addAgents(ctx context.Context, n int) error {
	for i := 1; i <= n; i++ {
		host := fmt.Sprintf("h%04d", i)
		hw := k.cfg.HostConfig("")
		hw.Host = host
		a, err := agent.Start(ctx, agent.Options{Host: host, DataDir: filepath.Join(k.dir, "agents", host), BusURL: k.srv.BusURL(),
			Creds: k.srv.Credentials(), Hardware: hw, UpdateResourcesInterval: time.Hour, ReportInterval: 10 * time.Second,
			BandwidthMiBps: float64(k.cfg.Libvirt.LiveMigrationBandwidth), Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("starting agent %s: %w", host, err)
		}
		k.agents = append(k.agents, a)
	}
	return nil
}

func (k *keelServer) stop() {
	for _, a := range k.agents {
		a.Stop()
	}
	if k.srv != nil {
		k.srv.Close()
	}
	k.cancel()
	os.RemoveAll(k.dir)
}

// parallel runs f(0…n-1) on workers goroutines and returns the wall time
// and the first error.
func parallel(workers, n int, f func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var once sync.Once
	var first error
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

// api measures boots and live migrations per second through keel's HTTP
// API: the in-process equivalent of `keel dev --hosts 1000`.
func (r *run) api(ctx context.Context) error {
	hosts := r.size(1000, 3)
	boots := r.size(2000, 12)
	migrations := r.size(1000, 6)
	const workers = 16
	k, err := startKeel(ctx, func(c *config.Config) {
		c.Libvirt.LiveMigrationBandwidth = 1 << 30 // near-zero copies
		c.Default.UpdateResourcesInterval = 3600
		c.FilterScheduler.HostSubsetSize = 3
	})
	if err != nil {
		return err
	}
	defer k.stop()
	if _, err := k.srv.Store().CreateFlavor(ctx, records.Flavor{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1}); err != nil {
		return fmt.Errorf("creating flavor: %w", err)
	}
	t0 := time.Now()
	if err := k.addAgents(ctx, hosts); err != nil {
		return err
	}
	r.progress("api: %d agents registered in %.1f s", hosts, time.Since(t0).Seconds())
	c := newHTTPClient(k.srv.URL(), k.token, "compute 2.30")
	// Wait until the scheduler sees every host.
	if err := waitFor(ctx, time.Minute, 100*time.Millisecond, func() (bool, error) {
		var out struct {
			Hypervisors []any `json:"hypervisors"`
		}
		_, err := c.do(ctx, "GET", "/compute/v2.1/os-hypervisors", nil, &out)
		return len(out.Hypervisors) >= hosts, err
	}); err != nil {
		return fmt.Errorf("waiting for %d hypervisors: %w", hosts, err)
	}

	ids := make([]string, boots)
	tBoot := time.Now()
	acceptTime, err := parallel(workers, boots, func(i int) error {
		var out struct {
			Server struct{ ID string } `json:"server"`
		}
		_, err := c.do(ctx, "POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprint("vm", i), "flavorRef": "1", "networks": "none"}}, &out)
		ids[i] = out.Server.ID
		return err
	})
	if err != nil {
		return fmt.Errorf("booting: %w", err)
	}
	// Count ACTIVE in the store, not through the API: polling the API
	// would load the server being measured.
	if err := waitFor(ctx, 2*time.Minute, 10*time.Millisecond, func() (bool, error) {
		ins, err := k.srv.Store().ListInstances(ctx, "")
		if err != nil {
			return false, err
		}
		active := 0
		for _, in := range ins {
			switch in.VMState {
			case "active":
				active++
			case "error":
				return false, fmt.Errorf("instance %s went to ERROR", in.UUID)
			}
		}
		return active >= boots, nil
	}); err != nil {
		return fmt.Errorf("waiting for %d ACTIVE: %w", boots, err)
	}
	bootTime := time.Since(tBoot)
	bootsPerSec := float64(boots) / bootTime.Seconds()
	r.figure("api_boots_per_s", bootsPerSec)

	migTime, err := parallel(workers, migrations, func(i int) error {
		id := ids[i]
		if _, err := c.do(ctx, "POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); err != nil {
			return err
		}
		return waitFor(ctx, time.Minute, 2*time.Millisecond, func() (bool, error) {
			ms, err := k.srv.Store().ListMigrations(ctx, store.MigrationFilter{InstanceUUID: id})
			if err != nil || len(ms) == 0 {
				return false, err
			}
			switch ms[0].Status {
			case "completed":
				return true, nil
			case "error", "failed":
				return false, fmt.Errorf("migration of %s: %s", id, ms[0].Status)
			}
			return false, nil
		})
	})
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	migPerSec := float64(migrations) / migTime.Seconds()
	r.figure("api_migrations_per_s", migPerSec)
	cond := fmt.Sprintf("one keel server in-process (SQLite, embedded NATS) + %s fake-driver agents as bus peers — `keel dev --hosts %d` without the process; instant spawn; %d clients at once over HTTP", commas(int64(hosts)), hosts, workers)
	r.row("3", "boots through the HTTP API", fmt.Sprintf("%s (%s accepted)", fmtRate(bootsPerSec, "boots/s"), fmtRate(float64(boots)/acceptTime.Seconds(), "POST/s")),
		fmt.Sprintf("%s POST /servers (m1.tiny), timed from the first request until every instance is ACTIVE; ", commas(int64(boots)))+cond)
	r.row("3", "live migrations through the HTTP API", fmtRate(migPerSec, "migrations/s"),
		fmt.Sprintf("%s os-migrateLive, each followed until its record reads completed; copies at 1 TiB/s (near zero); ", commas(int64(migrations)))+cond)
	r.progress("api: %.0f boots/s, %.0f migrations/s", bootsPerSec, migPerSec)
	return nil
}

// waitFor polls cond every so often until it says true, returns an error, or
// timeout passes.
func waitFor(ctx context.Context, timeout, every time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still not done after %v", timeout)
		case <-time.After(every):
		}
	}
}
