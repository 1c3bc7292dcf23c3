package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Connection tuning. Reconnection never stops.
const (
	// ReconnectWait is the pause between reconnection attempts to one
	// server (plus up to ReconnectJitter).
	ReconnectWait   = time.Second
	ReconnectJitter = 500 * time.Millisecond
	// PingInterval and maxPingsOut bound how long a dead server (whose TCP
	// connection did not break) goes unnoticed: about 45 s without a
	// message or a PONG from it (see Conn.watch).
	PingInterval = 15 * time.Second
	maxPingsOut  = 2
	// HandshakeTimeout bounds a connection's dial and handshake (INFO,
	// CONNECT, the server's check of the identity, PONG), on the client
	// and, for the embedded server, as its auth_timeout. nats' default of
	// 2 s fails the handshakes of a connection storm on a loaded server
	// (thousands of agents starting or reconnecting at once), and each
	// failed one is started again from the beginning: more load, not less.
	HandshakeTimeout = 10 * time.Second
)

// Conn is a connection to the bus.
type Conn struct {
	nc     *nats.Conn
	log    *slog.Logger
	ctx    context.Context // parent of handler contexts; cancelled by Close
	cancel context.CancelFunc

	lostMu sync.Mutex
	lost   chan struct{} // closed, and replaced, at every disconnection

	dedupe  dedupe       // requests handled, by request id
	repeats atomic.Int64 // repeated calls answered from dedupe
	limit   *logLimit    // lines logged per call, one per kind and logEvery
}

// Connect connects to the bus at url, which may list several servers of a
// cluster separated by commas, as user creds; name identifies the client
// in the server's logs and monitoring. While no server can be reached at
// all (connection refused, dial timeout) it keeps trying until ctx is done;
// an authentication failure is returned at once. ctx bounds only this first
// connection: once connected, the Conn reconnects forever (to any server in
// the list or discovered from the cluster), logging disconnections and
// reconnections to log (nil: discard), until Close.
//
// While disconnected, calls, casts and publications fail at once with
// ErrUnavailable and ErrNotDelivered; nothing is buffered to be sent after a
// reconnection. Subscriptions (Handle, Subscribe) are restored on
// reconnection.
func Connect(ctx context.Context, url string, creds Credentials, name string, log *slog.Logger) (*Conn, error) {
	if strings.TrimSpace(strings.ReplaceAll(url, ",", "")) == "" {
		return nil, errors.New("bus: no server URL")
	}
	if err := creds.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "bus", "client", name)
	c := &Conn{log: log, lost: make(chan struct{}), dedupe: dedupe{now: time.Now}, limit: newLogLimit(logEvery, time.Now)}

	opts := []nats.Option{
		nats.Name(name),
		nats.UserInfo(creds.User, creds.Password),
		nats.Timeout(HandshakeTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectJitter(ReconnectJitter, ReconnectJitter),
		// Keep reconnecting even if the server refuses the credentials
		// twice in a row (nats.go gives up by default, even with
		// MaxReconnects(-1)).
		nats.IgnoreAuthErrorAbort(),
		// Never buffer messages while disconnected: a cast must fail
		// rather than be delivered minutes later, and a call must fail
		// fast rather than wait for its deadline.
		nats.ReconnectBufSize(-1),
		// nats.go's own check counts PINGs whose PONG is late, however
		// much else the server sends meanwhile: a busy connection to a
		// server that is behind (its PONG queued after thousands of
		// messages) was declared stale, and every reply in flight lost.
		// Conn.watch checks liveness instead; nats.go only keeps pinging.
		nats.PingInterval(livenessInterval),
		nats.MaxPingsOutstanding(math.MaxInt32),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			c.markLost()
			if err != nil {
				log.Warn("bus disconnected", "err", err)
			} else {
				log.Debug("bus disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("bus reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Debug("bus reconnection attempt failed", "err", err)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Debug("bus connection closed")
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("bus error", "subject", sub.Subject, "err", err)
			} else {
				log.Error("bus error", "err", err)
			}
		}),
	}

	if host, ok := creds.AgentHost(); ok {
		// An agent may subscribe to its own inbox only.
		opts = append(opts, nats.CustomInboxPrefix(AgentInboxPrefix(host)))
	}

	backoff := 100 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bus: connect to %s: %w", url, err)
		}
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			log.Debug("bus connected", "url", nc.ConnectedUrlRedacted())
			c.nc = nc
			c.ctx, c.cancel = context.WithCancel(context.Background())
			go c.watch(livenessInterval, livenessInterval*(maxPingsOut+1))
			return c, nil
		}
		if !retryableConnectError(err) {
			return nil, fmt.Errorf("bus: connect to %s as %s: %w", url, creds.User, err)
		}
		// Jittered: agents that lost the bus together do not come back
		// in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		log.Warn("bus not reachable, retrying", "url", url, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bus: connect to %s: %w (last error: %v)", url, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// livenessInterval is PingInterval; tests shorten it.
var livenessInterval = PingInterval

// watch declares the connection stale, and reconnects it, when the server
// has sent nothing for tolerance: no message, and no PONG to the PING it
// sends every interval (one at a time). A server that is alive but behind
// keeps sending messages while its PONG waits behind them, so a busy
// connection is never taken for a dead one; an idle connection to a dead
// server is found as nats.go would (interval × (maxPingsOut + 1)). It
// returns when the connection is closed.
func (c *Conn) watch(interval, tolerance time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var probing atomic.Bool
	var ponged atomic.Int64 // when the last probe's PONG came (UnixNano)
	lastIn := c.nc.Stats().InMsgs
	alive := time.Now()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if !c.nc.IsConnected() {
			alive = now // the reconnection has its own timeouts
			continue
		}
		if in := c.nc.Stats().InMsgs; in != lastIn {
			lastIn, alive = in, now
		}
		if p := time.Unix(0, ponged.Load()); p.After(alive) {
			alive = p
		}
		if silent := now.Sub(alive); silent > tolerance {
			c.log.Warn("bus connection stale: nothing from the server, not even a PONG; reconnecting", "silent_for", silent.Round(time.Millisecond))
			_ = c.nc.ForceReconnect()
			alive = now
			continue
		}
		if probing.CompareAndSwap(false, true) {
			go func() {
				defer probing.Store(false)
				ctx, cancel := context.WithTimeout(c.ctx, tolerance)
				defer cancel()
				if c.nc.FlushWithContext(ctx) == nil {
					ponged.Store(time.Now().UnixNano())
				}
			}()
		}
	}
}

// retryableConnectError tells whether a first connection that failed with
// err is tried again: the server could not be reached, or it was too slow
// to finish the handshake — its auth_timeout passed before it checked the
// identity ("authentication timeout"), or its first PING came before the
// answer to ours ("expected 'PONG', got 'PING'"; nats.go says both only
// in the error's text). A refused identity is not.
func retryableConnectError(err error) bool {
	var netErr net.Error
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, io.EOF) || errors.As(err, &netErr) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authentication timeout") || strings.Contains(msg, "expected 'pong', got 'ping'")
}

// Close closes the connection at once, cancelling the contexts of running
// handlers (whose replies are then lost). Drain a Subscription first to let
// its handlers finish.
func (c *Conn) Close() {
	c.cancel()
	c.nc.Close()
}

// IsConnected reports whether the connection is currently up.
func (c *Conn) IsConnected() bool { return c.nc.IsConnected() }

// ConnectedURL is the URL of the server the connection is using now
// (password redacted), or "" while disconnected.
func (c *Conn) ConnectedURL() string { return c.nc.ConnectedUrlRedacted() }

// notConnected returns the error for sending while the connection is not up.
func (c *Conn) notConnected(what string) error {
	if c.nc.IsClosed() {
		return fmt.Errorf("bus: %s: %w", what, nats.ErrConnectionClosed)
	}
	return &unavailableError{
		msg:   fmt.Sprintf("%s: not connected to the bus (%s)", what, c.nc.Status()),
		cause: nats.ErrDisconnected,
	}
}

// markLost wakes the calls waiting for an answer: the connection they sent
// on is gone, and so is any answer sent to it.
func (c *Conn) markLost() {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	close(c.lost)
	c.lost = make(chan struct{})
}

// lostSignal is closed at the next disconnection.
func (c *Conn) lostSignal() <-chan struct{} {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	return c.lost
}

// RepeatedCalls counts the calls this connection's handlers received again
// with a request id they had already handled, and answered without running
// the handler a second time.
func (c *Conn) RepeatedCalls() int64 { return c.repeats.Load() }

// MessageCounts are the messages this connection has received and sent
// since it connected (the client library's counters, reconnections
// included): what its owner costs the bus.
func (c *Conn) MessageCounts() (in, out uint64) {
	st := c.nc.Stats()
	return st.InMsgs, st.OutMsgs
}
