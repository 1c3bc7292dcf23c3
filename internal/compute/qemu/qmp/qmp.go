// Package qmp is a small client for QEMU's machine protocol (QMP) over a
// unix socket: line-delimited JSON, the capabilities handshake first,
// every command with its own deadline and matched to its answer by id,
// and events drained all the time (a client that stops reading them
// makes QEMU block). Answers are decoded into the caller's own structs,
// so migration states newer than any generated binding still decode.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// DefaultTimeout bounds a command whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Event is one asynchronous QMP event.
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
	// Timestamp is when QEMU emitted it.
	Timestamp time.Time `json:"-"`
}

// Error is an error QEMU answered a command with.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// ErrClosed is returned by commands on a closed (or broken) connection.
var ErrClosed = errors.New("qmp: connection closed")

// Conn is one QMP session. Its methods are safe for concurrent use.
type Conn struct {
	nc     net.Conn
	wmu    sync.Mutex // serialises writes
	mu     sync.Mutex // guards pending, nextID, err
	pend   map[string]chan reply
	nextID int64
	err    error
	done   chan struct{}
	events chan Event
}

type reply struct {
	ret json.RawMessage
	err error
}

type message struct {
	QMP       json.RawMessage `json:"QMP"`
	Return    json.RawMessage `json:"return"`
	Error     *Error          `json:"error"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	ID        json.RawMessage `json:"id"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// Dial connects to the QMP socket at path, reads the greeting and
// negotiates capabilities, all within ctx (DefaultTimeout if it has no
// deadline).
func Dial(ctx context.Context, path string) (*Conn, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connecting to %s: %w", path, err)
	}
	c := &Conn{nc: nc, pend: map[string]chan reply{}, done: make(chan struct{}), events: make(chan Event, 64)}
	greeting := make(chan error, 1)
	go c.read(greeting)
	select {
	case err = <-greeting:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		err = c.Execute(ctx, "qmp_capabilities", nil, nil)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp: handshake on %s: %w", path, err)
	}
	return c, nil
}

func withDefault(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// read dispatches every line QEMU sends until the connection ends: the
// greeting, answers (by id) and events (kept while there is room in the
// Events channel, dropped after that, never blocking).
func (c *Conn) read(greeting chan<- error) {
	sc := bufio.NewScanner(c.nc)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first := true
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue // not JSON: ignore the line
		}
		switch {
		case first && m.QMP != nil:
			first = false
			greeting <- nil
		case m.Event != "":
			ev := Event{Name: m.Event, Data: m.Data}
			if m.Timestamp != nil {
				ev.Timestamp = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
			}
			select {
			case c.events <- ev:
			default: // nobody reads events: drop them, keep draining
			}
		default:
			var id string
			_ = json.Unmarshal(m.ID, &id)
			c.mu.Lock()
			ch := c.pend[id]
			delete(c.pend, id)
			c.mu.Unlock()
			if ch != nil {
				r := reply{ret: m.Return}
				if m.Error != nil {
					r.err = m.Error
				}
				ch <- r
			}
		}
	}
	err := sc.Err()
	if err == nil {
		err = ErrClosed
	}
	if first {
		greeting <- fmt.Errorf("no greeting: %w", err)
	}
	c.mu.Lock()
	c.err = err
	for id, ch := range c.pend {
		ch <- reply{err: fmt.Errorf("%w: %v", ErrClosed, err)}
		delete(c.pend, id)
	}
	c.mu.Unlock()
	close(c.done)
	close(c.events)
}

// Events returns the channel of events. It is closed when the connection
// ends. Events arriving while it is full are dropped.
func (c *Conn) Events() <-chan Event { return c.events }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Execute runs one command with args (nil for none) and decodes its
// answer into out (nil to ignore it), within ctx (DefaultTimeout if it has
// no deadline). A command whose deadline passes is abandoned: its late
// answer is dropped.
func (c *Conn) Execute(ctx context.Context, cmd string, args, out any) error {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w: %v", cmd, ErrClosed, err)
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	ch := make(chan reply, 1)
	c.pend[id] = ch
	c.mu.Unlock()
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	line, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return fmt.Errorf("%s: encoding arguments: %w", cmd, err)
	}
	c.wmu.Lock()
	dl, _ := ctx.Deadline()
	_ = c.nc.SetWriteDeadline(dl)
	_, err = c.nc.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		return fmt.Errorf("%s: %w", cmd, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("%s: %w", cmd, r.err)
		}
		if out != nil && len(r.ret) > 0 {
			if err := json.Unmarshal(r.ret, out); err != nil {
				return fmt.Errorf("%s: decoding the answer: %w", cmd, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("%s: no answer: %w", cmd, ctx.Err())
	}
}

func (c *Conn) forget(id string) {
	c.mu.Lock()
	delete(c.pend, id)
	c.mu.Unlock()
}

// HumanMonitor runs a human monitor (HMP) command line, such as
// "xp /1wx 0x1000", and returns its output.
func (c *Conn) HumanMonitor(ctx context.Context, line string) (string, error) {
	var out string
	err := c.Execute(ctx, "human-monitor-command", map[string]string{"command-line": line}, &out)
	return out, err
}

// Close ends the session.
func (c *Conn) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}
