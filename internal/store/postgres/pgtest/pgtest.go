// Package pgtest runs a throw-away PostgreSQL cluster for tests: initdb in a
// temporary directory, the postmaster started as a child of the test binary
// (listening only on a unix socket in that directory, so parallel test
// binaries never compete for a port), one fresh database per test, created
// from a template, and everything removed when the tests end.
//
// It needs PostgreSQL's server binaries (Debian's postgresql package). They
// are looked for in $KEEL_PG_BINDIR, then where `pg_config --bindir` says,
// then under /usr/lib/postgresql/*/bin (the newest version), then on PATH.
// When they are missing the tests fail, saying what to install: a test that
// skipped would pass in a CI that forgot to install them.
//
// initdb and postgres refuse to run as root: as root, the cluster runs as
// the postgres user (which Debian's package creates), its directory owned by
// that user.
//
// A package's tests use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.NewDatabase(t, "")
//		…
//	}
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"keel/internal/testenv"
)

// InstallHint says what to do when the binaries are missing.
const InstallHint = "install PostgreSQL's server binaries: apt-get update && " +
	"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql " +
	"(or set KEEL_PG_BINDIR to the directory holding initdb and postgres)"

// Cluster is a running throw-away cluster.
type Cluster struct {
	dir    string // owns everything; removed by Stop
	sock   string // unix socket directory
	port   int
	bindir string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string

	mu        sync.Mutex
	admin     *pgx.Conn // on database postgres, for CREATE/DROP DATABASE
	templates map[string]*template
	n         atomic.Int64
}

// socketPort only names the socket file: TCP is off.
const socketPort = 5432

// FindBinDir returns the directory holding initdb and postgres.
func FindBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("KEEL_PG_BINDIR"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("KEEL_PG_BINDIR=%s holds no initdb and postgres; %s", d, InstallHint)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found: %s", InstallHint)
}

// pgVersion reads the major version from /usr/lib/postgresql/N/bin.
func pgVersion(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

// Start creates and starts a cluster. Stop it with Stop.
func Start(ctx context.Context) (_ *Cluster, err error) {
	bindir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	runAs, err := clusterUser()
	if err != nil {
		return nil, err
	}
	// Short, so the socket path stays within the 107 bytes unix sockets
	// allow even with a long TMPDIR.
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	sweepStale(base)
	dir, err := os.MkdirTemp(base, "keel-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{dir: dir, sock: dir, port: socketPort, bindir: bindir, log: filepath.Join(dir, "postgres.log"),
		templates: map[string]*template{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if runAs != nil {
		if err := os.Chown(dir, int(runAs.uid), int(runAs.gid)); err != nil {
			return nil, fmt.Errorf("pgtest: handing %s to the postgres user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := c.command(ctx, runAs, "initdb", "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}

	logf, err := os.Create(c.log)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close()
	if runAs != nil {
		_ = logf.Chown(int(runAs.uid), int(runAs.gid))
	}
	// The postmaster runs in the foreground as our child, not through
	// pg_ctl: with Pdeathsig it shuts down even if the test binary is
	// killed (a timeout, ^C) before Stop. Durability is off: the cluster is
	// thrown away.
	c.cmd = c.command(context.Background(), runAs, "postgres", "-D", data,
		"-k", c.sock, "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	setDeathSignal(c.cmd)
	if err := c.cmd.Start(); err != nil {
		c.cmd = nil
		return nil, fmt.Errorf("pgtest: starting postgres: %w", err)
	}
	exited, cmd := make(chan struct{}), c.cmd
	c.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()

	// Wait until it accepts connections.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c.admin, err = pgx.Connect(cctx, c.URL("postgres"))
		cancel()
		if err == nil {
			return c, nil
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("pgtest: postgres exited at start:\n%s", c.logTail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgtest: postgres not accepting connections after 60s: %v\n%s", err, c.logTail())
		}
	}
}

// sweepStale removes the directories of clusters whose test binary was
// killed before it could remove them (the postmaster itself dies with it):
// those more than ten minutes old whose postmaster is not running.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, "keel-pg-*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if pid, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			first, _, _ := strings.Cut(string(pid), "\n")
			if n, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && processAlive(n) {
				continue
			}
		}
		_ = os.RemoveAll(d)
	}
}

// command builds a command running a PostgreSQL binary, as runAs if not
// nil.
func (c *Cluster) command(ctx context.Context, runAs *account, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bindir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
	if runAs != nil {
		cmd.Env = append(cmd.Env, "HOME="+c.dir, "USER=postgres", "LOGNAME=postgres")
		setCredential(cmd, runAs)
	}
	return cmd
}

// account is a user to run the cluster as.
type account struct{ uid, gid uint32 }

// clusterUser returns the credentials to run the cluster with: nil (this
// process's) unless running as root, then those of the postgres user.
func clusterUser() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and initdb refuses root; there is no postgres user to run as (%v): %s", err, InstallHint)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user postgres has uid %q, gid %q", u.Uid, u.Gid)
	}
	return &account{uid: uint32(uid), gid: uint32(gid)}, nil
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// URL returns the connection URL of database db.
func (c *Cluster) URL(db string) string {
	q := url.Values{"host": {c.sock}, "port": {strconv.Itoa(c.port)}, "user": {"postgres"}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", Path: "/" + db, RawQuery: q.Encode()}).String()
}

// Stop stops the cluster and removes its directory. It is safe to call
// more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	if c.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.admin.Close(ctx)
		cancel()
		c.admin = nil
	}
	if c.cmd != nil {
		// SIGQUIT: immediate shutdown, nothing to keep.
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
			errs = append(errs, errors.New("pgtest: postgres did not stop on SIGQUIT; killed"))
		}
		c.cmd = nil
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("pgtest: %w", err))
		}
		c.dir = ""
	}
	return errors.Join(errs...)
}

// exec runs a statement on the admin connection.
func (c *Cluster) exec(ctx context.Context, sql string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admin == nil {
		return errors.New("pgtest: cluster stopped")
	}
	_, err := c.admin.Exec(ctx, sql)
	return err
}

// CreateDatabase creates an empty database, or a copy of template if it is
// not empty, and returns its name.
func (c *Cluster) CreateDatabase(ctx context.Context, template string) (string, error) {
	name := fmt.Sprintf("test_%d", c.n.Add(1))
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if err := c.exec(ctx, sql); err != nil {
		return "", fmt.Errorf("pgtest: creating database: %w", err)
	}
	return name, nil
}

// DropDatabase drops a database, closing its connections.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if err := c.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: dropping database %s: %w", name, err)
	}
	return nil
}

// template is a template database, prepared once.
type template struct {
	once sync.Once
	err  error
}

// Template creates, once per name, a database set up by prepare (given its
// URL), to copy with CREATE DATABASE … TEMPLATE: the way to give every test
// a migrated schema without migrating each time. prepare must close its
// connections before returning. Later calls with the same name wait for
// the first and return its error.
func (c *Cluster) Template(ctx context.Context, name string, prepare func(ctx context.Context, url string) error) error {
	c.mu.Lock()
	t := c.templates[name]
	if t == nil {
		t = &template{}
		c.templates[name] = t
	}
	c.mu.Unlock()
	t.once.Do(func() {
		err := c.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		if err == nil {
			err = prepare(ctx, c.URL(name))
		}
		if err != nil {
			t.err = fmt.Errorf("pgtest: preparing template %s: %w", name, err)
		}
	})
	return t.err
}

// The cluster shared by a test binary: started on first use, stopped by
// Main.
var shared struct {
	sync.Mutex
	main    bool
	cluster *Cluster
	err     error
	started bool
}

// Main runs a package's tests and stops the shared cluster, if a test
// started it, before exiting. Call it from TestMain.
func Main(m *testing.M) {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.cluster != nil {
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	shared.Unlock()
	os.Exit(code)
}

// Shared returns the test binary's cluster, starting it on first use. It
// fails tb if the cluster cannot start (the binaries are missing, say) or
// if Main is not running the tests.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	testenv.External(tb, "PostgreSQL (Debian's postgresql)")
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		tb.Fatal("pgtest: call pgtest.Main(m) from TestMain, which stops the cluster")
	}
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		shared.cluster, shared.err = Start(ctx)
		cancel()
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.cluster
}

// NewDatabase creates a database for tb in the shared cluster, a copy of
// template if not empty (see Template), dropped when tb ends, and returns
// its URL.
func NewDatabase(tb testing.TB, template string) string {
	tb.Helper()
	c := Shared(tb)
	ctx := context.Background()
	name, err := c.CreateDatabase(ctx, template)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.DropDatabase(context.Background(), name); err != nil {
			tb.Error(err)
		}
	})
	return c.URL(name)
}
