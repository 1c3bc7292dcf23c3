package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Conductor-side methods (subjects keel.conductor.<method>, served by
// every server in the queue group "conductor").
const (
	mBuildDone      = "build_done"
	mCopyProgress   = "copy_progress"
	mCopyDone       = "copy_done"
	mPutHostRecord  = "put_host_record"
	mConsumersOn    = "consumers_on"
	mGetConsumer    = "get_consumer"
	mWriteAllocs    = "write_allocations"
	mGetInstance    = "get_instance"
	mListMigrations = "list_migrations"
	mRegisterHost   = "register_host"
	mHeartbeat      = "service_heartbeat"
	mAuditDrift     = "audit_drift"
	mListInstances  = "list_instances"
	mGetMigration   = "get_migration"
	mFaultLost      = "fault_lost_instance"
	mRestoreFound   = "restore_found_instance"

	conductorQueue = "conductor"
)

type reportArgs struct {
	InstanceUUID string `json:"instance_uuid,omitempty"`
	Host         string `json:"host,omitempty"`
	MigrationID  int64  `json:"migration_id,omitempty"`
	Error        string `json:"error,omitempty"`
	Total        int64  `json:"total,omitempty"`
	Processed    int64  `json:"processed,omitempty"`
	Remaining    int64  `json:"remaining,omitempty"`
	// Restarted: a copy_done whose copy the source agent's restart cut
	// short (compute.ErrCopyRestarted).
	Restarted bool `json:"restarted,omitempty"`
}

type storeArgs struct {
	Host       string                      `json:"host,omitempty"`
	UUID       string                      `json:"uuid,omitempty"`
	Record     *records.HostRecord         `json:"record,omitempty"`
	Writes     []placement.AllocationWrite `json:"writes,omitempty"`
	Filter     store.MigrationFilter       `json:"filter"`
	HostConfig *compute.HostConfig         `json:"host_config,omitempty"`
	Zone       string                      `json:"zone,omitempty"`
	At         time.Time                   `json:"at"`
	ID         int64                       `json:"id,omitempty"`
	Fault      string                      `json:"fault,omitempty"`
}

// Reporter sends an agent's reports to the conductor, one attempt per
// call: BuildDone and CopyDone answer nil once a server committed the
// report (or refused it for good: a report that no longer applies is
// answered nil by the conductor, and one it cannot read never will be),
// and an error when no server answered or the one that did could not
// commit it (its store failed: a full disk). The agent puts a
// compute.Outbox in front of it, which keeps each report on disk and
// sends it again until it is taken.
type Reporter struct {
	Conn *bus.Conn
	// Host is the agent's host: its reports go out under its conductor
	// prefix (bus.AgentConductorSubject), the only one its bus identity
	// may publish on.
	Host string
	Log  *slog.Logger
	// Timeout bounds one attempt (default 10 s).
	Timeout time.Duration
}

var _ compute.Reporter = (*Reporter)(nil)

func (r *Reporter) send(ctx context.Context, method string, args reportArgs) error {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * attemptTime
	}
	// A fresh id for every attempt: the bus answers a repeated id with the
	// first answer, which for a store failure would be the failure again.
	// The conductor takes a repeated report as a no-op.
	ctx, cancel := context.WithTimeout(bus.WithRequestID(ctx, bus.NewRequestID()), timeout)
	defer cancel()
	err := r.Conn.Call(ctx, bus.AgentConductorSubject(r.Host, method), args, nil)
	switch {
	case err == nil:
		return nil
	case bus.IsCode(err, bus.CodeNotFound) || bus.IsCode(err, bus.CodeForbidden) || bus.IsCode(err, bus.CodeInvalid) || bus.IsCode(err, codeInvalidState):
		// Sending it again would get the same answer.
		if r.Log != nil {
			r.Log.Warn("conductor refused a report for good", "report", method, "migration", args.MigrationID, "instance", args.InstanceUUID, "err", err)
		}
		return nil
	}
	// No server answered, or the one that did could not commit it (a
	// store failure, a write conflict with another replica): not taken.
	return fmt.Errorf("%s report not taken: %w", method, err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// BuildDone implements compute.Reporter.
func (r *Reporter) BuildDone(ctx context.Context, instanceUUID, host string, err error) error {
	return r.send(ctx, mBuildDone, reportArgs{InstanceUUID: instanceUUID, Host: host, Error: errText(err)})
}

// CopyProgress implements compute.Reporter (best effort: one lost
// progress report is replaced by the next).
func (r *Reporter) CopyProgress(ctx context.Context, migID int64, total, processed, remaining int64) {
	go func() {
		_ = r.Conn.Cast(context.WithoutCancel(ctx), bus.AgentConductorSubject(r.Host, mCopyProgress),
			reportArgs{MigrationID: migID, Total: total, Processed: processed, Remaining: remaining})
	}()
}

// CopyDone implements compute.Reporter.
func (r *Reporter) CopyDone(ctx context.Context, migID int64, err error) error {
	return r.send(ctx, mCopyDone, reportArgs{MigrationID: migID, Error: errText(err), Restarted: errors.Is(err, compute.ErrCopyRestarted)})
}

// AuditDrift sends an audit's findings to the servers (best effort: a lost
// report only leaves a metric short).
func (r *Reporter) AuditDrift(ctx context.Context, d compute.Drift) {
	_ = r.Conn.Cast(ctx, bus.AgentConductorSubject(r.Host, mAuditDrift), d)
}

// Store is an agent's view of the store, through the servers. It
// implements compute.TrackerStore. Host is the agent's host: its calls go
// out under its conductor prefix, and the servers refuse those that
// concern another host.
type Store struct {
	Conn *bus.Conn
	Host string
	// pace spaces the calls' repeats while the servers are slow or
	// unreachable (shared by all of the agent's store calls).
	pace pacing
}

var (
	_ compute.TrackerStore    = (*Store)(nil)
	_ compute.MigrationReader = (*Store)(nil)
	_ compute.InstanceLister  = (*Store)(nil)
	_ compute.InstanceFaulter = (*Store)(nil)
)

// call sends a store call to whichever server answers. Within ctx's
// deadline (a call without one is tried once), a call no server received
// is sent again (a NATS restart, servers restarting), and so is one whose
// answer the bus lost, except a write that is not idempotent
// (write_allocations): the repeat may reach another server, which would
// apply it again. The repeats are paced (pacing): the slower the servers
// have been to answer, the longer an attempt waits before it is repeated.
func (s *Store) call(ctx context.Context, method string, args, resp any) error {
	ctx = bus.WithRequestID(ctx, bus.NewRequestID())
	_, retries := ctx.Deadline()
	t0 := time.Now()
	for retry := 0; ; retry++ {
		actx := ctx
		if method != mWriteAllocs {
			actx = bus.WithAttempt(ctx, s.pace.attempt())
		}
		err := s.Conn.Call(actx, bus.AgentConductorSubject(s.Host, method), args, resp)
		if err == nil || !errors.Is(err, bus.ErrUnavailable) {
			s.pace.answered(time.Since(t0))
		} else {
			s.pace.failed()
		}
		if err == nil {
			return nil
		}
		again := retries && (errors.Is(err, bus.ErrNotDelivered) || (repeatable(err) && method != mWriteAllocs))
		if !again {
			return fmt.Errorf("%s: %w", method, decode(err))
		}
		if errors.Is(err, bus.ErrNoAnswerYet) {
			continue // the attempt already waited: send it again now
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", method, decode(err))
		case <-time.After(s.pace.pause(retry)):
		}
	}
}

// PutHostRecord implements compute.TrackerStore.
func (s *Store) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	return s.call(ctx, mPutHostRecord, storeArgs{Record: &h}, nil)
}

// ConsumersOn implements compute.TrackerStore.
func (s *Store) ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error) {
	var out []placement.Consumer
	err := s.call(ctx, mConsumersOn, storeArgs{UUID: providerUUID}, &out)
	return out, err
}

// GetConsumer implements compute.TrackerStore.
func (s *Store) GetConsumer(ctx context.Context, uuid string) (placement.Consumer, error) {
	var out placement.Consumer
	err := s.call(ctx, mGetConsumer, storeArgs{UUID: uuid}, &out)
	return out, err
}

// WriteAllocations implements compute.TrackerStore.
func (s *Store) WriteAllocations(ctx context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error) {
	var out placement.WritePlan
	err := s.call(ctx, mWriteAllocs, storeArgs{Writes: writes}, &out)
	return out, err
}

// GetInstance implements compute.TrackerStore.
func (s *Store) GetInstance(ctx context.Context, uuid string) (records.Instance, error) {
	var out records.Instance
	err := s.call(ctx, mGetInstance, storeArgs{UUID: uuid}, &out)
	return out, err
}

// ListMigrations implements compute.TrackerStore.
func (s *Store) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	var out []records.Migration
	err := s.call(ctx, mListMigrations, storeArgs{Filter: f}, &out)
	return out, err
}

// ListInstances implements compute.InstanceLister.
func (s *Store) ListInstances(ctx context.Context, host string) ([]records.Instance, error) {
	var out []records.Instance
	err := s.call(ctx, mListInstances, storeArgs{Host: host}, &out)
	return out, err
}

// GetMigration implements compute.MigrationReader.
func (s *Store) GetMigration(ctx context.Context, id int64) (records.Migration, error) {
	var out records.Migration
	err := s.call(ctx, mGetMigration, storeArgs{ID: id}, &out)
	return out, err
}

// FaultLostInstance implements compute.InstanceFaulter.
func (s *Store) FaultLostInstance(ctx context.Context, uuid, host, fault string) (bool, error) {
	var done bool
	err := s.call(ctx, mFaultLost, storeArgs{UUID: uuid, Host: host, Fault: fault}, &done)
	return done, err
}

// RestoreFoundInstance implements compute.InstanceFaulter.
func (s *Store) RestoreFoundInstance(ctx context.Context, uuid, host string) (bool, error) {
	var done bool
	err := s.call(ctx, mRestoreFound, storeArgs{UUID: uuid, Host: host}, &done)
	return done, err
}

// RegisterHost makes sure the host has a resource provider with the
// inventories of cfg and a service record (created enabled in zone), and
// returns the provider UUID (an existing provider keeps its UUID).
func (s *Store) RegisterHost(ctx context.Context, cfg compute.HostConfig, zone string) (string, error) {
	var uuid string
	err := s.call(ctx, mRegisterHost, storeArgs{HostConfig: &cfg, Zone: zone}, &uuid)
	return uuid, err
}

// Heartbeat records that the host's agent is alive at at.
func (s *Store) Heartbeat(ctx context.Context, host string, at time.Time) error {
	return s.call(ctx, mHeartbeat, storeArgs{Host: host, At: at}, nil)
}

// heartbeatReply is a heartbeat's answer when it carried a host record:
// whether the server wrote it (or found it unchanged). A server from
// before heartbeats carried records answers nothing (false): it took the
// heartbeat and ignored the record.
type heartbeatReply struct {
	Record bool `json:"record,omitempty"`
}

// HeartbeatWithRecord is Heartbeat carrying the host's record (its
// measured usage: compute.Manager.Heartbeat), one message instead of a
// heartbeat and a put_host_record. It tells whether the server took the
// record; rec nil is a plain heartbeat.
func (s *Store) HeartbeatWithRecord(ctx context.Context, host string, at time.Time, rec *records.HostRecord) (bool, error) {
	if rec == nil {
		return false, s.Heartbeat(ctx, host, at)
	}
	var out heartbeatReply
	err := s.call(ctx, mHeartbeat, storeArgs{Host: host, At: at, Record: rec}, &out)
	return out.Record, err
}

// ConductorHandlers is what the server plugs into ServeConductor.
type ConductorHandlers struct {
	Store    ServedStore
	Reporter compute.Reporter // the conductor
	// NewProviderUUID makes the UUID of a newly registered host's provider.
	NewProviderUUID func() string
	// OnDrift, if set, receives every agent audit's findings (metrics).
	OnDrift func(compute.Drift)
	// Clock stamps the instances an agent's audit puts in ERROR (default:
	// the wall clock).
	Clock clock.Clock
	// Revoked, if set, tells whether a host's bus identity is revoked
	// (keel agent revoke): every report and store call it sends is
	// refused, whatever bus it came through.
	Revoked func(ctx context.Context, host string) bool
	// Log receives a warning for every report or call refused because it
	// is about another host (default: slog.Default()).
	Log *slog.Logger
	// Images, if set, serves read_image: the image data the real drivers
	// boot from.
	Images ImageReader
}

// ServeConductor answers the agents' reports and store calls on conn, in
// the queue group shared by every server. Every report, and every call
// that names a host, passes concernsSender first (see checked); the store
// reads pass their own checks (reads.go), the allocation writes
// writesOfSender.
func ServeConductor(conn *bus.Conn, h ConductorHandlers) ([]bus.Subscription, error) {
	st := h.Store
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	clk := h.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	beats := newHeartbeatRecorder(st)
	hostRecords := newHostRecordWriter(st)
	misses := &missedRecords{log: log}
	copyOf := func(a reportArgs) about { return about{Migration: a.MigrationID} }
	ofHost := func(a storeArgs) about { return onHost(a.Host) }
	handlers := map[string]bus.Handler{
		mBuildDone: checked(st, log, mBuildDone, func(a reportArgs) about { return onHost(a.Host).withInstance(a.InstanceUUID) }, report(func(ctx context.Context, a reportArgs) error {
			return h.Reporter.BuildDone(ctx, a.InstanceUUID, a.Host, errOf(a.Error))
		})),
		mCopyProgress: checked(st, log, mCopyProgress, copyOf, report(func(ctx context.Context, a reportArgs) error {
			h.Reporter.CopyProgress(ctx, a.MigrationID, a.Total, a.Processed, a.Remaining)
			return nil
		})),
		mCopyDone: checked(st, log, mCopyDone, copyOf, report(func(ctx context.Context, a reportArgs) error {
			copyErr := errOf(a.Error)
			if a.Restarted && copyErr != nil {
				copyErr = compute.RestartedError(a.Error)
			}
			return h.Reporter.CopyDone(ctx, a.MigrationID, copyErr)
		})),
		mAuditDrift: checked(st, log, mAuditDrift, func(d compute.Drift) about { return onHost(d.Host) },
			func(_ context.Context, d compute.Drift) (any, error) {
				if h.OnDrift != nil {
					h.OnDrift(d)
				}
				return nil, nil
			}),
		mFaultLost: checked(st, log, mFaultLost, func(a storeArgs) about { return onHost(a.Host).withInstance(a.UUID) },
			func(ctx context.Context, a storeArgs) (any, error) {
				if a.UUID == "" || a.Host == "" || a.Fault == "" {
					return nil, &placement.InvalidError{Msg: "fault_lost_instance needs uuid, host and fault"}
				}
				return compute.StoreFaulter{Store: st, Clock: clk}.FaultLostInstance(ctx, a.UUID, a.Host, a.Fault)
			}),
		mRestoreFound: checked(st, log, mRestoreFound, func(a storeArgs) about { return onHost(a.Host).withInstance(a.UUID) },
			func(ctx context.Context, a storeArgs) (any, error) {
				if a.UUID == "" || a.Host == "" {
					return nil, &placement.InvalidError{Msg: "restore_found_instance needs uuid and host"}
				}
				return compute.StoreFaulter{Store: st, Clock: clk}.RestoreFoundInstance(ctx, a.UUID, a.Host)
			}),
		mPutHostRecord: checked(st, log, mPutHostRecord, func(a storeArgs) about {
			if a.Record == nil {
				return onHost("")
			}
			return onHost(a.Record.Host)
		}, func(ctx context.Context, a storeArgs) (any, error) {
			if a.Record == nil {
				return nil, &placement.InvalidError{Msg: "no host record given"}
			}
			return nil, hostRecords.add(ctx, *a.Record)
		}),
		mListInstances: checked(st, log, mListInstances, ofHost, func(ctx context.Context, a storeArgs) (any, error) {
			if a.Host == "" {
				return nil, &placement.InvalidError{Msg: "no host given"}
			}
			return st.ListInstances(ctx, a.Host)
		}),
		mRegisterHost: checked(st, log, mRegisterHost, func(a storeArgs) about {
			if a.HostConfig == nil {
				return onHost("")
			}
			return onHost(a.HostConfig.Host)
		}, func(ctx context.Context, a storeArgs) (any, error) {
			if a.HostConfig == nil {
				return nil, &placement.InvalidError{Msg: "no host configuration given"}
			}
			// A host registering (again: its agent restarted, or its
			// service was deleted) has its next record written whatever
			// it holds.
			hostRecords.forget(a.HostConfig.Host)
			return registerHost(ctx, st, *a.HostConfig, a.Zone, h.NewProviderUUID)
		}),
		mHeartbeat: checked(st, log, mHeartbeat, ofHost,
			func(ctx context.Context, a storeArgs) (any, error) {
				return beatWithRecord(ctx, beats, hostRecords, a, misses)
			}),
		mConsumersOn: decoded(func(ctx context.Context, a storeArgs) (any, error) {
			if err := providerOfSender(ctx, st, a.UUID); err != nil {
				return nil, err
			}
			return st.ConsumersOn(ctx, a.UUID)
		}),
		mGetConsumer: decoded(func(ctx context.Context, a storeArgs) (any, error) { return consumerForSender(ctx, st, a.UUID) }),
		mWriteAllocs: decoded(func(ctx context.Context, a storeArgs) (any, error) {
			if err := writesOfSender(ctx, st, a.Writes); err != nil {
				return nil, err
			}
			return st.WriteAllocations(ctx, a.Writes...)
		}),
		mGetInstance: decoded(func(ctx context.Context, a storeArgs) (any, error) { return instanceForSender(ctx, st, a.UUID) }),
		mListMigrations: decoded(func(ctx context.Context, a storeArgs) (any, error) {
			f, err := migrationFilterOfSender(ctx, a.Filter)
			if err != nil {
				return nil, err
			}
			return st.ListMigrations(ctx, f)
		}),
		mGetMigration: decoded(func(ctx context.Context, a storeArgs) (any, error) { return migrationForSender(ctx, st, a.ID) }),
		mReadImage:    serveReadImage(st, h.Images, log),
	}
	if h.Revoked != nil {
		for m, hd := range handlers {
			handlers[m] = unlessRevoked(h.Revoked, hd)
		}
	}
	return serveAll(conn, func(method string) string { return bus.AgentConductorSubject("*", method) }, conductorQueue, handlers)
}

// beatWithRecord records a heartbeat and, when it carries one, the host's
// record, both at once (each joins its own group commit). The heartbeat's
// failure is the call's; the record's is told in the answer (not taken:
// the agent sends it apart), so a host whose record cannot be written is
// not seen down.
func beatWithRecord(ctx context.Context, beats *heartbeatRecorder, hostRecords *hostRecordWriter, a storeArgs, misses *missedRecords) (any, error) {
	if a.Record == nil {
		return nil, beats.record(ctx, a.Host, a.At)
	}
	if a.Record.Host != a.Host {
		return nil, &placement.InvalidError{Msg: fmt.Sprintf("heartbeat of host %q carries the record of host %q", a.Host, a.Record.Host)}
	}
	recErr := make(chan error, 1)
	go func() { recErr <- hostRecords.add(ctx, *a.Record) }()
	err := beats.record(ctx, a.Host, a.At)
	rerr := <-recErr
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		misses.note(a.Host, rerr)
	}
	return heartbeatReply{Record: rerr == nil}, nil
}

// missedRecords logs the heartbeats whose host record was not written
// (the agent's deadline passed first: an overloaded server), one line per
// 10 s with how many: a restart under 5,000 agents logged 637 lines in a
// minute, one per heartbeat.
type missedRecords struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
	n    int
}

func (m *missedRecords) note(host string, err error) {
	m.mu.Lock()
	m.n++
	if time.Since(m.last) < 10*time.Second {
		m.mu.Unlock()
		return
	}
	n := m.n
	m.n, m.last = 0, time.Now()
	m.mu.Unlock()
	m.log.Warn("heartbeats' host records not written; their agents send them apart", "records", n, "last_host", host, "err", err)
}

// checked is the handler of a report from an agent, or of a call naming
// its host: it decodes the arguments, refuses a call whose subject (what
// names) is not the sender's (concernsSender: forbidden, and a warning in
// the log), and hands the rest to fn.
func checked[A any](st ServedStore, log *slog.Logger, method string, what func(A) about, fn func(ctx context.Context, a A) (any, error)) bus.Handler {
	return decoded(func(ctx context.Context, a A) (any, error) {
		if err := concernsSender(ctx, st, what(a)); err != nil {
			if bus.IsCode(err, bus.CodeForbidden) {
				log.Warn("refused an agent's report or call about what is not its host's", "method", method, "from", sender(ctx), "err", err)
			}
			return nil, err
		}
		return fn(ctx, a)
	})
}

// unlessRevoked refuses (forbidden) every call from a host whose identity
// is revoked, and hands the others to next.
func unlessRevoked(revoked func(context.Context, string) bool, next bus.Handler) bus.Handler {
	return func(ctx context.Context, data json.RawMessage) (any, error) {
		if from := sender(ctx); from == "" || revoked(ctx, from) {
			return nil, forbidden("host %q: its bus identity is revoked (keel agent revoke); enroll it again", from)
		}
		return next(ctx, data)
	}
}

// serveAll subscribes every handler at its method's subject, in queue
// group queue ("" for none); on an error it undoes what it subscribed.
func serveAll(conn *bus.Conn, subject func(method string) string, queue string, handlers map[string]bus.Handler) ([]bus.Subscription, error) {
	bySubject := make(map[string]bus.Handler, len(handlers))
	for method, h := range handlers {
		bySubject[subject(method)] = h
	}
	subs, err := conn.HandleAll(bySubject, queue)
	if err != nil {
		return nil, fmt.Errorf("serving %d methods on the bus: %w", len(handlers), err)
	}
	return subs, nil
}

func errOf(msg string) error {
	if msg == "" {
		return nil
	}
	return remoteFailure(msg)
}

// remoteFailure is an agent's failure message.
type remoteFailure string

func (e remoteFailure) Error() string { return string(e) }

// report is the body of a report's handler: fn runs to the end even if
// the agent stops waiting, and the agent's call is answered only after fn
// returns, with fn's error when the report was not committed (the agent
// then sends it again).
func report(fn func(ctx context.Context, a reportArgs) error) func(context.Context, reportArgs) (any, error) {
	return func(ctx context.Context, a reportArgs) (any, error) {
		return nil, fn(context.WithoutCancel(ctx), a)
	}
}

// decoded is a bus handler that decodes its arguments into an A, calls fn
// and encodes fn's error for the caller.
func decoded[A any](fn func(ctx context.Context, a A) (any, error)) bus.Handler {
	return func(ctx context.Context, data json.RawMessage) (any, error) {
		var a A
		if err := bus.Decode(data, &a); err != nil {
			return nil, err
		}
		res, err := fn(ctx, a)
		return res, encode(err)
	}
}

// registerHost checks the agent's host name (a bus subject token) and
// registers the host (compute.RegisterHost). An agent that registers
// again while it runs (its service was deleted: Agent's heartbeat) names
// the provider UUID its tracker holds, and a new provider takes it, as a
// restarted nova-compute keeps its compute node's UUID; a UUID another
// host's provider has is refused by RegisterHost (it exists under another
// name).
func registerHost(ctx context.Context, st ServedStore, cfg compute.HostConfig, zone string, newUUID func() string) (string, error) {
	if err := bus.ValidHostName(cfg.Host); err != nil {
		return "", &placement.InvalidError{Msg: err.Error()}
	}
	if cfg.ProviderUUID != "" {
		if err := uuid.Validate(cfg.ProviderUUID); err != nil {
			return "", &placement.InvalidError{Msg: fmt.Sprintf("provider UUID %q: %v", cfg.ProviderUUID, err)}
		}
		newUUID = func() string { return cfg.ProviderUUID }
	}
	return compute.RegisterHost(ctx, st, cfg, records.Service{Zone: zone}, newUUID)
}
