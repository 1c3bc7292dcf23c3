package rpc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/records"
)

// Agent-side methods, Nova's names.
const (
	mBuild         = "build_and_run_instance"
	mTerminate     = "terminate_instance"
	mCheckDest     = "check_can_live_migrate_destination"
	mCheckSource   = "check_can_live_migrate_source"
	mPreLive       = "pre_live_migration"
	mLiveMigration = "live_migration"
	mAbort         = "live_migration_abort"
	mForce         = "live_migration_force_complete"
	mPostSource    = "post_live_migration_at_source"
	mPostDest      = "post_live_migration_at_destination"
	mRollbackDest  = "rollback_live_migration_at_destination"
	mAudit         = "update_available_resource"
	mCheckIncoming = "check_incoming"
	mCheckCopy     = "check_copy"
)

// computeArgs is every agent method's request: only the fields a method
// needs are set.
type computeArgs struct {
	Instance    records.Instance `json:"instance,omitempty"`
	UUID        string           `json:"uuid,omitempty"`
	Host        string           `json:"host,omitempty"` // source or destination, per method
	MigrationID int64            `json:"migration_id,omitempty"`
	// Version is the migration record's version the call was made from
	// (the agent's fence: a call older than a version it saw is refused).
	Version int64             `json:"version,omitempty"`
	Data    map[string]string `json:"data,omitempty"`
	// ImageID, Offset and Length are a read_snapshot's chunk.
	ImageID string `json:"image_id,omitempty"`
	Offset  int64  `json:"offset,omitempty"`
	Length  int    `json:"length,omitempty"`
}

// Agents reaches agents over the bus: it implements conductor.Computes
// and compute.Peers. Timeout bounds each call that has no deadline of its
// own (default: the bus's, 30 s): past it, the agent is taken for gone.
type Agents struct {
	Conn    *bus.Conn
	Timeout time.Duration
}

var (
	_ conductor.Computes   = Agents{}
	_ compute.Peers        = Agents{}
	_ conductor.ComputeAPI = (*Agent)(nil)
	_ compute.Peer         = (*Agent)(nil)
)

// Compute implements conductor.Computes.
func (a Agents) Compute(host string) (conductor.ComputeAPI, error) { return a.agent(host) }

// Peer implements compute.Peers.
func (a Agents) Peer(host string) (compute.Peer, error) { return a.agent(host) }

func (a Agents) agent(host string) (*Agent, error) {
	if err := bus.ValidHostName(host); err != nil {
		return nil, err
	}
	return &Agent{conn: a.Conn, host: host, timeout: a.Timeout}, nil
}

// Agent is one agent's RPC client.
type Agent struct {
	conn    *bus.Conn
	host    string
	timeout time.Duration
}

func (a *Agent) call(ctx context.Context, method string, args computeArgs, resp any) error {
	if _, ok := ctx.Deadline(); !ok && a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	// A request nobody received (the agent is restarting or reconnecting)
	// is safe to send again, and so is one whose answer the bus lost (a
	// NATS restart while the agent worked): every attempt carries the same
	// request id, and the agent answers a repeat with its first answer
	// instead of running the step twice. Retry until the deadline.
	// An attempt that got no answer within attemptTime is repeated too:
	// the agent's answer may have been lost on a NATS node that went down
	// while this side's connection stayed up.
	ctx = bus.WithAttempt(bus.WithRequestID(ctx, bus.NewRequestID()), attemptTime)
	wait := 50 * time.Millisecond
	for {
		err := a.conn.Call(ctx, bus.ComputeSubject(a.host, method), args, resp)
		if err == nil {
			return nil
		}
		if !repeatable(err) {
			return callError(method, a.host, err)
		}
		select {
		case <-ctx.Done():
			return callError(method, a.host, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// callError is the error of an agent call that failed with err: the
// agent's own error decoded, and a call that got no answer
// (bus.ErrUnavailable) marked conductor.ErrAgentUnreachable for the
// conductor, which repeats such steps later.
func callError(method, host string, err error) error {
	out := fmt.Errorf("%s on %s: %w", method, host, decode(err))
	if errors.Is(err, bus.ErrUnavailable) {
		return conductor.Unreachable(out)
	}
	return out
}

// attemptTime is how long one attempt of a call waits for its answer
// before it is sent again with the same request id (which the other side
// answers from its first run): it bounds how long an answer lost in the
// bus delays a step.
const attemptTime = 5 * time.Second

// repeatable reports whether a call that failed with err may be sent
// again with the same request id: nobody received it, or its answer was
// lost or is late.
func repeatable(err error) bool {
	return errors.Is(err, bus.ErrNotDelivered) || errors.Is(err, bus.ErrConnectionLost) || errors.Is(err, bus.ErrNoAnswerYet)
}

// BuildAndRunInstance implements conductor.ComputeAPI.
func (a *Agent) BuildAndRunInstance(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mBuild, computeArgs{Instance: inst}, nil)
}

// TerminateInstance implements conductor.ComputeAPI.
func (a *Agent) TerminateInstance(ctx context.Context, uuid string) error {
	return a.call(ctx, mTerminate, computeArgs{UUID: uuid}, nil)
}

// CheckCanLiveMigrateDestination implements conductor.ComputeAPI.
func (a *Agent) CheckCanLiveMigrateDestination(ctx context.Context, inst records.Instance, source string) error {
	return a.call(ctx, mCheckDest, computeArgs{Instance: inst, Host: source}, nil)
}

// CheckCanLiveMigrateSource implements compute.Peer.
func (a *Agent) CheckCanLiveMigrateSource(ctx context.Context, inst records.Instance, dest string) error {
	return a.call(ctx, mCheckSource, computeArgs{Instance: inst, Host: dest}, nil)
}

// CheckIncoming implements compute.Peer.
func (a *Agent) CheckIncoming(ctx context.Context, uuid string) error {
	return a.call(ctx, mCheckIncoming, computeArgs{UUID: uuid}, nil)
}

// PreLiveMigration implements conductor.ComputeAPI.
func (a *Agent) PreLiveMigration(ctx context.Context, inst records.Instance) (map[string]string, error) {
	var data map[string]string
	err := a.call(ctx, mPreLive, computeArgs{Instance: inst}, &data)
	return data, err
}

// LiveMigration implements conductor.ComputeAPI: the agent accepts the copy
// and reports its end through the conductor's reporter subjects.
func (a *Agent) LiveMigration(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	return a.call(ctx, mLiveMigration, computeArgs{MigrationID: migID, Version: version, Instance: inst, Host: dest, Data: data}, nil)
}

// AbortLiveMigration implements conductor.ComputeAPI.
func (a *Agent) AbortLiveMigration(ctx context.Context, uuid string) error {
	return a.call(ctx, mAbort, computeArgs{UUID: uuid}, nil)
}

// CheckCopy implements conductor.ComputeAPI: the source reports the copy
// of migID ended if it never started it (compute.Manager.CheckCopy).
func (a *Agent) CheckCopy(ctx context.Context, migID int64) error {
	return a.call(ctx, mCheckCopy, computeArgs{MigrationID: migID}, nil)
}

// ForceCompleteLiveMigration implements conductor.ComputeAPI.
func (a *Agent) ForceCompleteLiveMigration(ctx context.Context, uuid string) error {
	return a.call(ctx, mForce, computeArgs{UUID: uuid}, nil)
}

// PostLiveMigrationAtSource implements conductor.ComputeAPI.
func (a *Agent) PostLiveMigrationAtSource(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mPostSource, computeArgs{Instance: inst}, nil)
}

// PostLiveMigrationAtDestination implements conductor.ComputeAPI.
func (a *Agent) PostLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mPostDest, computeArgs{Instance: inst}, nil)
}

// RollbackLiveMigrationAtDestination implements conductor.ComputeAPI.
func (a *Agent) RollbackLiveMigrationAtDestination(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mRollbackDest, computeArgs{Instance: inst}, nil)
}

// Audit asks the agent to run its periodic audit now and returns the drift
// it found.
func (a *Agent) Audit(ctx context.Context) (compute.Drift, error) {
	var d compute.Drift
	err := a.call(ctx, mAudit, computeArgs{}, &d)
	return d, err
}

// ServeAgent answers every agent method for m's host on conn. Stop the
// returned subscriptions to stop serving.
func ServeAgent(conn *bus.Conn, m *compute.Manager) ([]bus.Subscription, error) {
	handlers := map[string]func(ctx context.Context, a computeArgs) (any, error){
		mBuild: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.BuildAndRunInstance(ctx, a.Instance)
		},
		mTerminate: func(ctx context.Context, a computeArgs) (any, error) { return nil, m.TerminateInstance(ctx, a.UUID) },
		mCheckDest: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.CheckCanLiveMigrateDestination(ctx, a.Instance, a.Host)
		},
		mCheckSource: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.CheckCanLiveMigrateSource(ctx, a.Instance, a.Host)
		},
		mPreLive: func(ctx context.Context, a computeArgs) (any, error) { return m.PreLiveMigration(ctx, a.Instance) },
		mLiveMigration: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.LiveMigration(ctx, a.MigrationID, a.Version, a.Instance, a.Host, a.Data)
		},
		mAbort:     func(ctx context.Context, a computeArgs) (any, error) { return nil, m.AbortLiveMigration(ctx, a.UUID) },
		mCheckCopy: func(ctx context.Context, a computeArgs) (any, error) { return nil, m.CheckCopy(ctx, a.MigrationID) },
		mForce: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.ForceCompleteLiveMigration(ctx, a.UUID)
		},
		mPostSource: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.PostLiveMigrationAtSource(ctx, a.Instance)
		},
		mPostDest: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.PostLiveMigrationAtDestination(ctx, a.Instance)
		},
		mRollbackDest: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.RollbackLiveMigrationAtDestination(ctx, a.Instance)
		},
		mAudit:         func(ctx context.Context, _ computeArgs) (any, error) { return m.Audit(ctx) },
		mCheckIncoming: func(ctx context.Context, a computeArgs) (any, error) { return nil, m.CheckIncoming(ctx, a.UUID) },
	}
	guestMethods(handlers, m)
	life := map[string]func(ctx context.Context, a computeArgs) (any, error){}
	lifecycleHandlers(m, life)
	for _, more := range []map[string]func(ctx context.Context, a computeArgs) (any, error){resizeHandlers(m), life} {
		for method := range more {
			if _, dup := handlers[method]; dup {
				return nil, fmt.Errorf("agent method %s is served twice (two handlers share a name)", method)
			}
		}
		maps.Copy(handlers, more)
	}
	typed := make(map[string]bus.Handler, len(handlers))
	for method, h := range handlers {
		typed[method] = decoded(h)
	}
	return serveAll(conn, func(method string) string { return bus.ComputeSubject(m.Host(), method) }, "", typed)
}
