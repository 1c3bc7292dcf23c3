// Package server is `keel server`: the control plane. It opens the store
// (SQLite under the data dir), runs or joins the bus (an embedded NATS
// server unless [keel] nats_url names one), builds the scheduler's host
// view and the conductor, resumes the migrations a restart interrupted,
// answers the agents' reports and store calls, and serves the HTTP API:
// /identity, /compute, /placement, /image, /keel (keel's API and the web
// view at /keel/ui/) and /metrics on one listener.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"keel/internal/api/computeapi"
	"keel/internal/api/placementapi"
	"keel/internal/audit"
	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/compute/fake"
	"keel/internal/conductor"
	"keel/internal/config"
	"keel/internal/identity"
	"keel/internal/image"
	"keel/internal/notify"
	"keel/internal/quota"
	"keel/internal/rpc"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/postgres"
	"keel/internal/store/sqlite"
)

// Server is a running keel server.
type Server struct {
	cfg      config.Config
	log      *slog.Logger
	store    store.Store
	busSrv   *bus.Server
	conn     *bus.Conn
	creds    bus.Credentials
	busURL   string
	cond     *conductor.Conductor
	sched    *scheduler.Scheduler
	subs     []bus.Subscription
	http     *http.Server
	listener net.Listener
	baseURL  string
	metrics  *Metrics
	ui       *uiHub
	agents   *agentRegistry
	notifier *notify.Notifier
	images   *image.Store
	lock     *dataDirLock // the data dir's, with a SQLite store
	// stopOwnership ends the replica's heartbeats and sweeps.
	stopOwnership context.CancelFunc
}

// Start starts a server and returns once it serves HTTP.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	cfg := s.cfg
	// A weighed metric no host will report fails every decision when
	// required: refuse before anything starts.
	warns, err := cfg.CheckMetrics()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	for _, w := range warns {
		s.log.Warn("configuration: " + w)
	}
	dataDir := cfg.Keel.DataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir %s: %w", dataDir, err)
	}
	// It holds the store, the keys and the passwords: the owner only.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return fmt.Errorf("making data dir %s private: %w", dataDir, err)
	}
	// One server a SQLite data dir: a second refuses before it reads
	// anything (it would resume the first one's migrations as its own).
	if !sharedStore(cfg.Keel.DB) {
		if s.lock, err = lockDataDir(dataDir); err != nil {
			return err
		}
	}
	if s.store, err = OpenStore(ctx, cfg.Keel.DB, dataDir); err != nil {
		return err
	}
	if err := shareIdentity(ctx, s.store, dataDir, s.log); err != nil {
		return err
	}
	if err := settleAdminQuota(ctx, s.store, dataDir); err != nil {
		return err
	}
	if cfg.Keel.NATSCredentials != "" {
		if s.creds, err = bus.ReadCredentials(cfg.Keel.NATSCredentials); err != nil {
			return fmt.Errorf("[keel] nats_credentials: %w", err)
		}
	} else if s.creds, err = bus.LoadOrCreateCredentials(dataDir); err != nil {
		return err
	}
	// The agents' identities (keel agent enroll, revoke) as of now; kept
	// fresh until Close.
	s.agents = &agentRegistry{st: s.store, log: s.log}
	if err := s.agents.refresh(ctx); err != nil {
		return fmt.Errorf("reading the agents' bus identities: %w", err)
	}
	s.busURL = cfg.Keel.NATSURL
	if s.busURL == "" {
		host, port, err := splitHostPort(cfg.Keel.NATSListen)
		if err != nil {
			return fmt.Errorf("[keel] nats_listen: %w", err)
		}
		s.busSrv, err = bus.StartServer(ctx, bus.ServerOptions{Host: host, Port: port, Creds: s.creds, Agents: s.agents, Logger: s.log})
		if err != nil {
			return err
		}
		srv := s.busSrv
		s.agents.onMoved = func(host string) {
			if n := srv.DisconnectAgent(host); n > 0 {
				s.log.Info("dropped the bus connections of an agent whose identity changed", "host", host, "connections", n)
			}
		}
		s.busURL = s.busSrv.URL()
	}
	if s.conn, err = bus.Connect(ctx, s.busURL, s.creds, "keel-server", s.log); err != nil {
		return err
	}
	if err := s.startNotifications(); err != nil {
		return err
	}

	policy := cfg.Keel.Policy
	if policy == "" {
		policy = scheduler.PolicyClaim
	}
	view, err := scheduler.NewView(ctx, s.store, policy)
	if err != nil {
		return err
	}
	sched, err := scheduler.New(cfg.SchedulerConfig(), view, clock.Real{}, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	if err != nil {
		return err
	}
	s.sched = sched
	s.metrics = newMetrics()
	s.ui = newUIHub(s.store, newHostView(s.store), cfg.Default.ServiceDownTime, s.log)
	name, err := serverName(cfg.Keel.ServerName, dataDir)
	if err != nil {
		return err
	}
	if s.images, err = openImages(cfg.Keel, s.log); err != nil {
		return err
	}
	s.cond = conductor.New(conductor.Config{
		MaxConcurrentLiveMigrations:         maxConcurrent(cfg.Default.MaxConcurrentLiveMigrations),
		MaxAttempts:                         cfg.Scheduler.MaxAttempts,
		Owner:                               name,
		ServiceDownTime:                     cfg.Default.ServiceDownTime,
		HeartbeatInterval:                   cfg.Default.ReportInterval,
		BuildTimeout:                        cfg.Default.InstanceBuildTimeout,
		AllowResizeToSameHost:               cfg.Default.AllowResizeToSameHost,
		ResizeConfirmWindow:                 cfg.Default.ResizeConfirmWindow,
		CopyStallTimeout:                    cfg.Keel.MigrationStallTimeout,
		MaxConcurrentIncomingLiveMigrations: cfg.Keel.MaxConcurrentIncomingLiveMigrations,
		MaxConcurrentLiveMigrationsTotal:    cfg.Keel.MaxConcurrentLiveMigrationsTotal,
		RebalanceInterval:                   cfg.Keel.RebalanceInterval,
		RebalanceThreshold:                  cfg.Keel.RebalanceThreshold,
		RebalanceMaxMoves:                   cfg.Keel.RebalanceMaxMoves,
		RebalanceBy:                         cfg.Keel.RebalanceBy,
		Quota:                               quota.Enforcer{Store: s.store},
		ShelvedOffloadTime:                  cfg.Default.ShelvedOffloadTime,
		Images:                              s.images,
	}, s.store, sched, rpc.Agents{Conn: s.conn, Timeout: cfg.Keel.RPCTimeout}, clock.Real{}, s.log, s.ui.hooks(s.metrics.hooks()))
	if s.subs, err = rpc.ServeConductor(s.conn, rpc.ConductorHandlers{Store: s.store, Reporter: s.ui.reporter(s.cond), NewProviderUUID: uuid.NewString,
		OnDrift: s.metrics.observeDrift, Revoked: s.agents.revoked, Log: s.log, Images: imageReader{s.images}}); err != nil {
		return err
	}
	if n, err := s.cond.Recover(ctx); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("resumed flows interrupted by a restart (boots, moves, lifecycle actions, plans)", "count", n)
	}
	// Heartbeats and the sweep for dead replicas' migrations run until
	// Close.
	ownCtx, stopOwnership := context.WithCancel(context.WithoutCancel(ctx))
	s.stopOwnership = stopOwnership
	s.cond.RunOwnership(ownCtx)
	s.cond.Plans().RunPlans(ownCtx)
	go s.agents.run(ownCtx)
	s.cond.Plans().RunRebalance(ownCtx)
	go s.ui.run(ownCtx)
	s.log.Info("server replica", "server_name", name)
	return s.serveHTTP(ctx)
}

func (s *Server) serveHTTP(ctx context.Context) error {
	cfg := s.cfg
	ln, err := net.Listen("tcp", cfg.Keel.Listen)
	if err != nil {
		return fmt.Errorf("[keel] listen %s: %w", cfg.Keel.Listen, err)
	}
	s.listener = ln
	s.baseURL = "http://" + ln.Addr().String()

	key, err := identity.LoadOrCreateKey(cfg.Keel.DataDir)
	if err != nil {
		return err
	}
	images := s.images
	// Users, projects, roles and revocations are the store's: a change
	// made through any replica holds on this one within DefaultRefresh.
	iss := &identity.Issuer{Key: key, TTL: cfg.API.TokenTTL, Shared: s.store, Catalog: cfg.Keel.CatalogOptions(), Log: s.log}
	api := computeapi.New(computeapi.Config{
		Store: s.store, Conductor: s.cond, Clock: clock.Real{}, ServiceDownTime: cfg.Default.ServiceDownTime,
		BaseURL: s.baseURL + "/compute", Log: s.log, Hosts: s.ui.view,
		Image:  func(ctx context.Context, id string) (computeapi.BootImage, bool) { return bootImage(ctx, images, id) },
		Images: images, ImageURL: s.baseURL + "/image",
		Caller: func(r *http.Request) (computeapi.Caller, bool) {
			p, ok := identity.PrincipalFrom(r.Context())
			return computeapi.Caller{UserID: p.UserID, ProjectID: p.ProjectID, Admin: p.IsAdmin()}, ok
		},
	})
	mux := http.NewServeMux()
	idh := iss.Handler(s.baseURL)
	mux.Handle("/identity", idh)
	mux.Handle("/identity/", idh)
	// Each service's version documents need no token; everything else does.
	openDocs(mux, api, "/compute", "/compute/v2.1")
	mux.Handle("/compute/", iss.Require(api, s.baseURL, computeapi.WriteError))
	keel := http.NewServeMux()
	s.keelAPI().routes(keel)
	s.ui.routes(mux, keel)
	mux.Handle("/keel/", iss.Require(jsonMisses(keel), s.baseURL, computeapi.WriteError))
	pl := placementapi.New(s.store, func(r *http.Request) bool {
		p, ok := identity.PrincipalFrom(r.Context())
		return ok && p.IsAdmin()
	})
	openDocs(mux, pl, "/placement")
	mux.Handle("/placement/", iss.Require(pl, s.baseURL, placementapi.WriteStatus))
	openDocs(mux, imageVersions(s.baseURL), "/image")
	mux.Handle("/image/", iss.Require(imageAPI(images), s.baseURL, nil))
	s.metrics.reg.MustRegister(notificationCollector{s.notifier})
	// /metrics names every host and counts every tenant's instances: the
	// admin's only.
	mux.Handle("GET /metrics", iss.Require(adminOnly(s.metrics.handler(s.store, cfg.Default.ServiceDownTime, newCloudCollector(s.ui))), s.baseURL, computeapi.WriteError))
	if cfg.Keel.EnablePprof {
		mux.Handle("/debug/pprof/", iss.Require(adminOnly(pprofHandler()), s.baseURL, computeapi.WriteError))
	}
	s.http = newHTTPServer(s.metrics.instrument(limitRequest(jsonMisses(mux)), s.log))
	go func() {
		if err := serveConns(s.http, ln, defaultConnLimits); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server stopped", "err", err)
		}
	}()
	if err := writeEndpoints(cfg.Keel.DataDir, s.baseURL, s.busURL); err != nil {
		return err
	}
	s.log.Info("keel server ready", "url", s.baseURL, "bus", s.busURL, "data_dir", cfg.Keel.DataDir)
	return nil
}

// openDocs serves doc without a token at each path, with or without a
// trailing slash (GET and HEAD): the version documents clients read
// before they log in.
func openDocs(mux *http.ServeMux, doc http.Handler, paths ...string) {
	for _, p := range paths {
		mux.Handle("GET "+p, doc)
		mux.Handle("GET "+p+"/{$}", doc)
	}
}

// Endpoints is DATA_DIR/endpoints.json: where a running server listens
// (useful with port 0, which picks free ports).
type Endpoints struct {
	API string `json:"api"`
	Bus string `json:"bus"`
}

func writeEndpoints(dataDir, api, busURL string) error {
	data, _ := json.MarshalIndent(Endpoints{API: api, Bus: busURL}, "", "  ")
	path := filepath.Join(dataDir, "endpoints.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// URL is the server's base URL (http://host:port).
func (s *Server) URL() string { return s.baseURL }

// BusURL is the NATS URL agents connect to.
func (s *Server) BusURL() string { return s.busURL }

// Credentials are the bus credentials agents need.
func (s *Server) Credentials() bus.Credentials { return s.creds }

// Conductor returns the server's conductor.
func (s *Server) Conductor() *conductor.Conductor { return s.cond }

// Close stops serving and releases everything, in reverse order.
func (s *Server) Close() {
	if s.ui != nil {
		s.ui.close() // ends the web view's streams
	}
	if s.stopOwnership != nil {
		s.stopOwnership()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	}
	// The bus's subscriptions stop delivering and are drained: the
	// handlers already running (an agent's report driving a flow) are
	// waited for, as the conductor's own flows are. Closing the conductor
	// cancels the agent calls in flight of both and refuses their next
	// effects, so neither waits for rpc_timeout; what is left stays in
	// its records for the next start's Recover. Then the bus and the
	// store close, nothing running over them.
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Keel.RPCTimeout+5*time.Second)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		var wg sync.WaitGroup
		for _, sub := range s.subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sub.Drain(); err != nil {
					_ = sub.Unsubscribe()
				}
			}()
		}
		wg.Wait()
	}()
	if s.cond != nil {
		if err := s.cond.Close(ctx); err != nil {
			s.log.Warn("closing the conductor", "err", err)
		}
	}
	select {
	case <-drained:
	case <-ctx.Done():
		s.log.Warn("closing the bus's subscriptions: handlers still running", "err", ctx.Err())
	}
	cancel()
	s.notifier.Close()
	if s.conn != nil {
		s.conn.Close()
	}
	if s.busSrv != nil {
		s.busSrv.Shutdown()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
	s.lock.release()
}

// serverName is the replica's name: [keel] server_name, or a UUID made
// once and kept in DATA_DIR/server_name (so a restart of the replica owns
// what it owned before).
func serverName(configured, dataDir string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	path := filepath.Join(dataDir, "server_name")
	if data, err := os.ReadFile(path); err == nil {
		if name := strings.TrimSpace(string(data)); name != "" {
			return name, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	name := uuid.NewString()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return name, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		return "", 0, fmt.Errorf("port %q is not a number", port)
	}
	return host, p, nil
}

// Store returns the server's store (keel dev seeds flavors through it).
func (s *Server) Store() store.Store { return s.store }

// OpenStore opens the store [keel] db names: PostgreSQL for a postgres://
// (or postgresql://) URL, else SQLite at that path or DATA_DIR/keel.db.
func OpenStore(ctx context.Context, db, dataDir string) (store.Store, error) {
	if sharedStore(db) {
		st, err := postgres.Open(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("opening the PostgreSQL store ([keel] db): %w", err)
		}
		return st, nil
	}
	if db == "" {
		db = filepath.Join(dataDir, "keel.db")
	}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("opening the store %s: %w", db, err)
	}
	return st, nil
}

// sharedStore reports whether [keel] db names a store replicas share
// (PostgreSQL); the default, SQLite in the data dir, is one server's.
func sharedStore(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// maxConcurrent is the conductor's per-source cap for
// max_concurrent_live_migrations, where 0 means unlimited (as in Nova).
func maxConcurrent(n int) int {
	if n <= 0 {
		return math.MaxInt32
	}
	return n
}

// keelAPI builds the /keel/v1 endpoints: the audit asks the agents for
// their guests and reads the conductor's slots; the conductor resets
// migrations.
func (s *Server) keelAPI() *keelAPI {
	cfg := s.cfg
	return &keelAPI{
		st: s.store, sched: s.sched, now: clock.Real{}.Now,
		audit: audit.Sources{
			Store: s.store, Agents: rpc.Agents{Conn: s.conn, Timeout: cfg.Keel.RPCTimeout}, Slots: s.cond,
			ServiceDownTime: cfg.Default.ServiceDownTime, AgentTimeout: min(cfg.Keel.RPCTimeout, 10*time.Second),
		},
		opt: audit.Options{
			BuildTimeout:     auditDeadline(cfg.Default.InstanceBuildTimeout, cfg),
			MigrationTimeout: auditDeadline(cfg.Keel.MigrationStallTimeout, cfg),
		},
		plans:       s.cond.Plans(),
		resetter:    s.cond,
		computeOpts: cfg.SnapshotCompute(),
		copyMiBps:   expectedCopyMiBps(cfg),
		log:         s.log,
	}
}

// expectedCopyMiBps is the copy rate expected of one live migration:
// live_migration_bandwidth, or with the fake driver, which models no cap
// as its default rate, that rate; 0 (unknown) for a real hypervisor with
// no cap.
func expectedCopyMiBps(cfg config.Config) float64 {
	if bw := cfg.Libvirt.LiveMigrationBandwidth; bw > 0 {
		return float64(bw)
	}
	if cfg.Keel.Driver == "" || cfg.Keel.Driver == "fake" {
		return fake.DefaultBandwidthMiBps
	}
	return 0
}

// auditDeadline is how long past the conductor's own timeout d the audit
// waits before it reports a flow stuck: the conductor's sweep notices a
// stall after service_down_time (a minute if that is 0) and its step may
// wait rpc_timeout for an agent. 0 (the timeout off) stays 0.
func auditDeadline(d time.Duration, cfg config.Config) time.Duration {
	if d <= 0 {
		return 0
	}
	stall := cfg.Default.ServiceDownTime
	if stall <= 0 {
		stall = time.Minute
	}
	return d + stall + cfg.Keel.RPCTimeout
}
