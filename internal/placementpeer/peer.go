// Package placementpeer runs OpenStack Placement 8.0 (Debian's
// python3-placement under gunicorn, on SQLite, without authentication) on
// a loopback port, for tests that send the same requests to it and to
// keel and compare the answers.
package placementpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Peer is a running Placement.
type Peer struct {
	// URL is where it answers (placement mounted at the root).
	URL string
	// Version is the highest microversion it serves, from its root
	// document.
	Version string
	dir     string
	cmd     *exec.Cmd
	log     string
}

// Available returns nil when Placement and gunicorn are installed, or an
// error naming the Debian packages to install.
func Available() error {
	if out, err := exec.Command("/usr/bin/python3", "-c", "import placement.wsgi").CombinedOutput(); err != nil {
		return fmt.Errorf("python3 cannot import placement.wsgi (%v: %s): apt-get install python3-placement gunicorn", err, bytes.TrimSpace(out))
	}
	if _, err := gunicorn(); err != nil {
		return err
	}
	if _, err := exec.LookPath("placement-manage"); err != nil {
		return fmt.Errorf("placement-manage not found: apt-get install python3-placement")
	}
	return nil
}

func gunicorn() (string, error) {
	for _, n := range []string{"gunicorn", "gunicorn3"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("gunicorn not found: apt-get install gunicorn")
}

// Start configures Placement on SQLite in a temporary directory (noauth2:
// any X-Auth-Token is an admin), syncs its database and serves it with one
// gunicorn worker until Stop.
func Start(ctx context.Context) (*Peer, error) {
	return StartSeeded(ctx, nil)
}

// Seed writes rows straight into Placement's SQLite database (at db) after
// its schema is made and before it serves: thousands of providers load in
// one transaction where Placement's API takes about 30 calls a second.
type Seed func(ctx context.Context, db string) error

// StartSeeded is Start with seed (when not nil) run on the synced
// database before gunicorn starts.
func StartSeeded(ctx context.Context, seed Seed) (_ *Peer, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	gun, _ := gunicorn()
	dir, err := os.MkdirTemp("", "placementpeer-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	p := &Peer{dir: dir, log: filepath.Join(dir, "gunicorn.log")}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	conf := filepath.Join(dir, "placement.conf")
	db := filepath.Join(dir, "placement.db")
	body := fmt.Sprintf("[DEFAULT]\nuse_stderr = true\n[api]\nauth_strategy = noauth2\n[placement_database]\nconnection = sqlite:///%s\n", db)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, fmt.Errorf("writing placement.conf: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "placement-manage", "--config-file", conf, "db", "sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("placement-manage db sync: %v\n%s", err, out)
	}
	if seed != nil {
		if err := seed(ctx, db); err != nil {
			return nil, fmt.Errorf("seeding placement.db: %w", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	p.URL = "http://" + addr
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, fmt.Errorf("gunicorn log: %w", err)
	}
	defer logf.Close()
	p.cmd = exec.Command(gun, "-w", "1", "--timeout", workerTimeout, "-b", addr, "--chdir", dir, "placement.wsgi:init_application()")
	p.cmd.Env = append(os.Environ(), "OS_PLACEMENT_CONFIG_DIR="+dir)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting gunicorn: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	// The caller's context bounds the wait; without a deadline of its
	// own, five minutes (a worker importing Placement at a load of 50).
	deadline := time.Now().Add(5 * time.Minute)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	for {
		if p.Version = rootVersion(ctx, p.URL); p.Version != "" {
			return p, nil
		}
		select {
		case err := <-exited:
			p.cmd = nil
			return nil, fmt.Errorf("gunicorn exited (%v): %s", err, p.tail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("placement did not answer on %s by %s: %s", p.URL, deadline.Format(time.TimeOnly), p.tail())
		}
	}
}

// rootVersion is the max_version of Placement's root document at url, or
// "" while it does not answer one.
func rootVersion(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var doc struct {
		Versions []struct {
			MaxVersion string `json:"max_version"`
		} `json:"versions"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil || len(doc.Versions) == 0 {
		return ""
	}
	return doc.Versions[0].MaxVersion
}

// workerTimeout is gunicorn's worker timeout in seconds: its default, 30,
// kills a worker still importing Placement at a load of 50 (ci14 saw three
// workers killed in a row), so it is raised to what a starved machine needs.
const workerTimeout = "300"

// Stop ends gunicorn (its master and worker) and removes the directory.
func (p *Peer) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		pg := -p.cmd.Process.Pid
		_ = syscall.Kill(pg, syscall.SIGTERM)
		for i := 0; i < 50 && syscall.Kill(pg, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(pg, syscall.SIGKILL)
	}
	os.RemoveAll(p.dir)
}

func (p *Peer) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
