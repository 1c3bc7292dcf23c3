package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimits bound the HTTP connections one server holds, so that no
// client can take them all (a client is an address: keel sees no further).
//
//   - Total: connections served at once; past it, new ones wait in the
//     kernel's backlog (the file descriptors are shared with the bus and
//     the store).
//   - PerClient: one address's connections. A new connection past it
//     closes that address's longest-idle connection, or is refused (closed
//     at once) when all of them are busy.
//   - Reserve: the last slots below Total. Once the open connections
//     reach Total-Reserve, a new connection from an address that already
//     holds FewConns or more takes the place of one of its own idle
//     connections or is refused, and one from an address holding fewer
//     (an operator's client, a health check, a load balancer's probe)
//     closes the longest-idle connection of all, so idle keep-alives give
//     way near the cap instead of after the idle timeout.
type connLimits struct {
	Total, PerClient, Reserve, FewConns int
}

// defaultConnLimits are keel server's.
var defaultConnLimits = connLimits{Total: maxConns, PerClient: 128, Reserve: 128, FewConns: 8}

// serveConns serves srv on ln within lim: the connections are counted per
// client address, and srv's ConnState tells which are idle.
func serveConns(srv *http.Server, ln net.Listener, lim connLimits) error {
	t := &connTracker{lim: lim, clients: map[string]*clientConns{}}
	t.room = sync.NewCond(&t.mu)
	srv.ConnState = t.state
	return srv.Serve(&trackingListener{Listener: ln, t: t})
}

type connTracker struct {
	lim     connLimits
	mu      sync.Mutex
	room    *sync.Cond // signalled when a connection goes
	open    int
	clients map[string]*clientConns
}

// clientConns are one address's open connections.
type clientConns struct {
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	t         *connTracker
	addr      string
	idleSince time.Time // zero while not idle (new or serving a request)
	gone      bool      // released: no longer counted
}

// Close closes the connection and gives back its slot.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.t.mu.Lock()
	c.t.releaseLocked(c)
	c.t.mu.Unlock()
	return err
}

type trackingListener struct {
	net.Listener
	t *connTracker
}

// Accept hands the server the next connection the limits admit; the ones
// they refuse are closed at once, and the idle ones they displace are
// closed before the new one is served.
func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, displaced := l.t.admit(c)
		for _, d := range displaced {
			d.Conn.Close()
		}
		if tc == nil {
			c.Close()
			continue
		}
		return tc, nil
	}
}

func clientAddr(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// admit counts c in, or refuses it (nil); displaced are idle connections
// given up to make room, already released, for the caller to close.
func (t *connTracker) admit(c net.Conn) (tc *trackedConn, displaced []*trackedConn) {
	addr := clientAddr(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	cl := t.clients[addr]
	held := 0
	if cl != nil {
		held = len(cl.conns)
	}
	// Makes room by giving up one of the address's own idle connections.
	ownIdle := func() bool {
		d := t.longestIdleLocked(cl)
		if d == nil {
			return false
		}
		t.releaseLocked(d)
		displaced = append(displaced, d)
		held--
		return true
	}
	if held >= t.lim.PerClient && !ownIdle() {
		return nil, displaced
	}
	if t.open >= t.lim.Total-t.lim.Reserve {
		if held >= t.lim.FewConns {
			if !ownIdle() {
				return nil, displaced
			}
		} else if d := t.longestIdleLocked(nil); d != nil {
			t.releaseLocked(d)
			displaced = append(displaced, d)
		}
	}
	for t.open >= t.lim.Total {
		if d := t.longestIdleLocked(nil); d != nil {
			t.releaseLocked(d)
			displaced = append(displaced, d)
			continue
		}
		t.room.Wait()
	}
	if cl = t.clients[addr]; cl == nil {
		cl = &clientConns{conns: map[*trackedConn]struct{}{}}
		t.clients[addr] = cl
	}
	tc = &trackedConn{Conn: c, t: t, addr: addr}
	cl.conns[tc] = struct{}{}
	t.open++
	return tc, displaced
}

// longestIdleLocked is the connection idle the longest, of cl or (nil) of
// every client; nil if none is idle.
func (t *connTracker) longestIdleLocked(cl *clientConns) *trackedConn {
	var best *trackedConn
	pick := func(cl *clientConns) {
		for c := range cl.conns {
			if !c.idleSince.IsZero() && (best == nil || c.idleSince.Before(best.idleSince)) {
				best = c
			}
		}
	}
	switch {
	case cl != nil:
		pick(cl)
	default:
		for _, cl := range t.clients {
			pick(cl)
		}
	}
	return best
}

// releaseLocked stops counting c (once).
func (t *connTracker) releaseLocked(c *trackedConn) {
	if c.gone {
		return
	}
	c.gone = true
	t.open--
	if cl := t.clients[c.addr]; cl != nil {
		delete(cl.conns, c)
		if len(cl.conns) == 0 {
			delete(t.clients, c.addr)
		}
	}
	t.room.Signal()
}

// state follows the server's view of each connection: idle between
// requests, busy otherwise; a closed or hijacked one is released.
func (t *connTracker) state(c net.Conn, s http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateIdle:
		if !tc.gone {
			tc.idleSince = time.Now()
		}
	case http.StateNew, http.StateActive:
		tc.idleSince = time.Time{}
	case http.StateClosed, http.StateHijacked:
		t.releaseLocked(tc)
	}
}
