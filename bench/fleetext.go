package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx": the fleet's PostgreSQL store, read for its change stream

	"keel/internal/store/postgres/pgtest"
)

// fleetBackend is what the fleet's servers share when they are not one
// process on SQLite with its embedded NATS: a throw-away PostgreSQL
// cluster (as the tests start it, internal/store/postgres/pgtest) and one
// Debian nats-server on loopback with one user and password.
type fleetBackend struct {
	pg        *pgtest.Cluster
	dbURL     string
	nats      *exec.Cmd
	natsDone  chan struct{}
	natsURL   string
	credsFile string
	pmPID     int // the postmaster's pid, once found
}

// natsServerBin finds Debian's nats-server (in /usr/sbin, often not on
// PATH).
func natsServerBin() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("nats-server not found on PATH or in /usr/sbin: install Debian's nats-server package")
}

// freeLoopbackPort is a loopback TCP port that was free a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startBackend starts PostgreSQL (one new database) and nats-server in
// dir; stop stops both.
func startBackend(ctx context.Context, dir string) (_ *fleetBackend, err error) {
	b := &fleetBackend{}
	defer func() {
		if err != nil {
			b.stop()
		}
	}()
	if b.pg, err = pgtest.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	db, err := b.pg.CreateDatabase(ctx, "")
	if err != nil {
		return nil, err
	}
	b.dbURL = b.pg.URL(db)
	bin, err := natsServerBin()
	if err != nil {
		return nil, err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	user, password := "keel", fmt.Sprintf("pw-%d-%d", time.Now().UnixNano(), os.Getpid())
	b.credsFile = filepath.Join(dir, "bus-credentials.json")
	creds, _ := json.Marshal(map[string]string{"user": user, "password": password})
	if err := os.WriteFile(b.credsFile, creds, 0o600); err != nil {
		return nil, err
	}
	// auth_timeout 10 s as keel's embedded NATS (docs/scaling-out.md: a
	// connection storm's handshakes).
	conf := fmt.Sprintf("server_name: fleet\nlisten: 127.0.0.1:%d\nauthorization {\n  user: %q\n  password: %q\n  timeout: 10\n}\n", port, user, password)
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	b.nats = exec.Command(bin, "-c", confPath)
	b.nats.Stdout, b.nats.Stderr = logf, logf
	if err := b.nats.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting nats-server: %w", err)
	}
	b.natsDone = make(chan struct{})
	go func() { _ = b.nats.Wait(); logf.Close(); close(b.natsDone) }()
	b.natsURL = "nats://127.0.0.1:" + strconv.Itoa(port)
	if err := waitFor(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-b.natsDone:
			return false, fmt.Errorf("nats-server exited (see %s)", filepath.Join(dir, "nats.log"))
		default:
		}
		c, err := net.Dial("tcp", b.natsURL[len("nats://"):])
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("waiting for nats-server: %w", err)
	}
	return b, nil
}

// stop stops nats-server and PostgreSQL.
func (b *fleetBackend) stop() {
	if b.nats != nil && b.natsDone != nil {
		_ = b.nats.Process.Kill()
		<-b.natsDone
	}
	if b.pg != nil {
		_ = b.pg.Stop()
	}
}

// serverArgs are a replica's flags for the backend.
func (b *fleetBackend) serverArgs() []string {
	return []string{"--set", "keel.db=" + b.dbURL, "--nats-url", b.natsURL, "--nats-credentials", b.credsFile}
}

// openStore opens the backend's database for the generator's reads.
func (b *fleetBackend) openStore() (*sql.DB, error) {
	return sql.Open("pgx", b.dbURL)
}

// cpu is the backend's user + system CPU time: nats-server's and the
// PostgreSQL postmaster's and its children's (the backends serving the
// servers' connections, which live as long as the pools keep them).
func (b *fleetBackend) cpu() time.Duration {
	var sum time.Duration
	if b.nats != nil {
		if d, err := procCPU(b.nats.Process.Pid); err == nil {
			sum += d
		}
	}
	pm := b.postmaster()
	if pm == 0 {
		return sum
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pm || pid == pm {
			if d, err := procCPU(pid); err == nil {
				sum += d
			}
		}
	}
	return sum
}

// postmaster is the pid of the cluster's postmaster (the postgres process
// started with -k and the socket directory in the database URL), or 0.
func (b *fleetBackend) postmaster() int {
	if b.pmPID != 0 {
		return b.pmPID
	}
	u, err := url.Parse(b.dbURL)
	if err != nil {
		return 0
	}
	want := "\x00-k\x00" + u.Query().Get("host") + "\x00"
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		raw, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(raw), want) {
			b.pmPID, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return b.pmPID
		}
	}
	return 0
}
