package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultHost is the address the embedded server binds when
// ServerOptions.Host is empty: loopback only.
const DefaultHost = "127.0.0.1"

// DefaultReadyTimeout bounds how long StartServer waits for the embedded
// server to accept connections when ctx has no earlier deadline.
const DefaultReadyTimeout = 10 * time.Second

// ServerOptions configure the embedded NATS server.
type ServerOptions struct {
	// Host is the address to listen on; "" means DefaultHost (127.0.0.1).
	Host string
	// Port is the client port; 0 picks a random free port (nats-server's
	// own default for 0 would be 4222).
	Port int
	// Creds are the servers' user, allowed everything; agents connect
	// with AgentCredentials derived from it. Required.
	Creds Credentials
	// Agents, if set, tells each host's enrollment epoch and whether its
	// identity is revoked; nil takes every host at epoch 0.
	Agents AgentStates
	// StoreDir is reserved for JetStream, which keel does not use yet.
	StoreDir string
	// Logger receives the server's log lines (notices and debug at debug
	// level). nil discards them. Nothing is written to stdout or stderr.
	Logger *slog.Logger
}

// Server is an embedded NATS server.
type Server struct {
	ns   *server.Server
	url  string
	once sync.Once
}

// StartServer starts an embedded NATS server and waits until it accepts
// connections (until ctx's deadline, or DefaultReadyTimeout).
func StartServer(ctx context.Context, o ServerOptions) (*Server, error) {
	if err := o.Creds.validate(); err != nil {
		return nil, err
	}
	host := o.Host
	if host == "" {
		host = DefaultHost
	}
	port := o.Port
	switch {
	case port == 0:
		port = server.RANDOM_PORT
	case port < 0 || port > 65535:
		return nil, fmt.Errorf("bus: invalid port %d", o.Port)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "nats-server")

	opts := &server.Options{
		ServerName: "keel-bus",
		Host:       host,
		Port:       port,
		// The servers' user has every permission; each agent connects
		// with credentials derived from it (AgentCredentials) and gets
		// AgentPermissions for its host.
		CustomClientAuthentication: identities{servers: o.Creds, agents: o.Agents, log: log},
		// A connection storm on a loaded server takes longer than nats'
		// 2 s to check each identity; the clients wait as long.
		AuthTimeout: HandshakeTimeout.Seconds(),
		// The first PING at the usual interval, not 2 s after the
		// CONNECT: a read loop that answers the client's own PING later
		// than that (a loaded server) would have the client read PING
		// where it waits for PONG, and fail its handshake.
		DisableShortFirstPing: true,
		NoSigs:                true,
		NoLog:                 true,
		StoreDir:              o.StoreDir,
		// No HTTP monitoring, no cluster, no JetStream, no leafnodes.
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded NATS server: %w", err)
	}
	sl := &serverLogger{log: log, limit: newLogLimit(logEvery, time.Now)}
	ns.SetLoggerV2(sl, log.Enabled(ctx, slog.LevelDebug), false, false)
	ns.Start()

	wait := DefaultReadyTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		wait = max(time.Until(dl), time.Millisecond)
	}
	// ReadyForConnections(wait) would sit out all of wait after a fatal
	// error such as "address already in use"; poll in short slices and stop
	// at the first fatal error.
	end := time.Now().Add(wait)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		msg := sl.fatal()
		if msg == "" && time.Now().Before(end) && ctx.Err() == nil {
			continue
		}
		ns.Shutdown()
		ns.WaitForShutdown()
		where := net.JoinHostPort(host, strconv.Itoa(o.Port))
		if msg != "" {
			return nil, fmt.Errorf("bus: embedded NATS server on %s: %s", where, msg)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bus: embedded NATS server on %s: %w", where, err)
		}
		return nil, fmt.Errorf("bus: embedded NATS server on %s not ready after %s", where, wait)
	}

	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		ns.Shutdown()
		return nil, errors.New("bus: embedded NATS server has no TCP address")
	}
	urlHost := host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		urlHost = DefaultHost
	}
	s := &Server{ns: ns, url: "nats://" + net.JoinHostPort(urlHost, strconv.Itoa(addr.Port))}
	log.Debug("embedded NATS server ready", "url", s.url)
	return s, nil
}

// URL is the client URL of the server, e.g. "nats://127.0.0.1:40123".
func (s *Server) URL() string { return s.url }

// Shutdown stops the server, disconnecting every client, and waits until it
// has stopped. It may be called more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// serverLogger adapts nats-server's logger to slog. Its Fatalf does not
// exit: the server calls it for errors such as "port in use" and then
// simply fails to become ready, which StartServer reports.
type serverLogger struct {
	log  *slog.Logger
	last atomic.Pointer[string] // last Fatalf message
	// limit passes one warning or error of each kind (its format without
	// the client's prefix) per logEvery: nats-server logs them from a
	// connection's read loop, which waits for the log meanwhile.
	limit *logLimit
}

// fatal is the message of the server's last fatal error, or "".
func (l *serverLogger) fatal() string {
	if p := l.last.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *serverLogger) Noticef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}

func (l *serverLogger) Warnf(format string, v ...any) {
	if strings.HasPrefix(format, "Plaintext passwords detected") {
		// The password is random and only in memory (and in a 0600
		// file); bcrypt would cost every connection for nothing.
		l.log.Debug(fmt.Sprintf(format, v...))
		return
	}
	l.limited(slog.LevelWarn, format, v)
}

// limited logs format at level if its kind is let through now, with the
// count of the lines of its kind left out since the last.
func (l *serverLogger) limited(level slog.Level, format string, v []any) {
	ok, suppressed := l.limit.allow(natsLogKind(format))
	if !ok {
		return
	}
	msg := fmt.Sprintf(format, v...)
	if suppressed > 0 {
		l.log.Log(context.Background(), level, msg, "more_like_it", suppressed, "within", logEvery)
		return
	}
	l.log.Log(context.Background(), level, msg)
}

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.last.Store(&msg)
	l.log.Error(msg)
}

func (l *serverLogger) Errorf(format string, v ...any) {
	l.limited(slog.LevelError, format, v)
}

func (l *serverLogger) Debugf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}

func (l *serverLogger) Tracef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}
