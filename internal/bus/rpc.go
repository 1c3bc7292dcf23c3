package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultCallTimeout bounds a Call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// DefaultFlushTimeout bounds the flush of a Cast or Publish whose context
// has no deadline.
const DefaultFlushTimeout = 10 * time.Second

// TimeoutHeader carries a call's remaining time, in milliseconds, to the
// handler, whose context gets that deadline.
const TimeoutHeader = "Keel-Timeout-Ms"

// envelope is the body of every reply.
type envelope struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Handler serves the messages of a subject. data is the JSON body; the
// result is marshalled to JSON as the reply's result (ignored for a cast),
// and an error is answered with code ErrorCode(err). ctx carries the
// caller's deadline (rounded down to the millisecond; none for a cast) and
// is also cancelled when the Conn is closed. An error returned after that
// deadline is not answered: the caller reports its own timeout.
type Handler func(ctx context.Context, data json.RawMessage) (any, error)

// Subscription is a handler or subscriber registered on a subject.
type Subscription interface {
	// Unsubscribe stops the delivery of messages at once. Handlers already
	// running go on, and their replies are still sent.
	Unsubscribe() error
	// Drain stops the delivery of new messages, lets the messages already
	// received be handled, and waits until every handler has returned.
	Drain() error
}

type subscription struct {
	sub      *nats.Subscription
	wg       sync.WaitGroup // running handlers
	done     chan struct{}  // closed when nats.go has delivered its last message
	doneOnce sync.Once
}

func (s *subscription) Unsubscribe() error { return s.sub.Unsubscribe() }

func (s *subscription) Drain() error {
	err := s.sub.Drain()
	if err != nil {
		select {
		case <-s.done:
		default:
			return err
		}
	}
	<-s.done
	s.wg.Wait()
	return nil
}

func newSubscription() *subscription {
	return &subscription{done: make(chan struct{})}
}

// subscribe registers cb and waits for the server's confirmation; s must
// be allocated before, as cb may run before subscribe returns.
func (c *Conn) subscribe(s *subscription, subject, queue string, cb nats.MsgHandler) (*subscription, error) {
	if err := c.subscribeUnconfirmed(s, subject, queue, cb); err != nil {
		return nil, err
	}
	if err := c.confirmSubscription(); err != nil {
		_ = s.sub.Unsubscribe()
		return nil, fmt.Errorf("bus: subscribe to %s: %w", subject, err)
	}
	return s, nil
}

// subscribeUnconfirmed registers cb without waiting for the server.
func (c *Conn) subscribeUnconfirmed(s *subscription, subject, queue string, cb nats.MsgHandler) error {
	var err error
	if queue == "" {
		s.sub, err = c.nc.Subscribe(subject, cb)
	} else {
		s.sub, err = c.nc.QueueSubscribe(subject, queue, cb)
	}
	if err != nil {
		return fmt.Errorf("bus: subscribe to %s: %w", subject, err)
	}
	s.sub.SetClosedHandler(func(string) { s.doneOnce.Do(func() { close(s.done) }) })
	return nil
}

// confirmWait bounds how long a subscription waits for the server's
// confirmation: as long as the connection's own liveness check (Conn.watch)
// takes to declare a silent server gone.
const confirmWait = PingInterval * (maxPingsOut + 1)

// confirmSubscription waits until the server has read the subscriptions
// sent before it (a PING after them answered), so that a call sent next
// from another connection finds them. A server that is slow to answer is
// waited for as long as the connection lives (up to confirmWait): at
// thousands of agents starting on a loaded machine a PONG can take over
// 10 s, and failing then made an agent give up its start while its
// subscription was already on its way. When the connection is lost
// meanwhile, or is down now, there is nothing to wait for: the
// subscriptions are sent again on reconnection.
func (c *Conn) confirmSubscription() error {
	lost := c.lostSignal()
	if !c.nc.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, confirmWait)
	defer cancel()
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := c.nc.FlushWithContext(ctx)
	if err == nil {
		return nil
	}
	select {
	case <-lost:
		return nil // restored on reconnection
	default:
	}
	if !c.nc.IsConnected() && !c.nc.IsClosed() {
		return nil
	}
	return err
}

// Call sends req (marshalled to JSON) to the handler of subject and decodes
// its result into resp (unless resp is nil). It waits until ctx's deadline,
// or DefaultCallTimeout if ctx has none.
//
// A handler's error comes back as a *RemoteError. If no handler answered,
// the error wraps ErrUnavailable, and also ErrNotDelivered if no handler got
// the request (nobody subscribed, or the bus was disconnected), or
// context.DeadlineExceeded if the deadline passed first.
func (c *Conn) Call(ctx context.Context, subject string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("bus: call %s: encode request: %w", subject, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		defer cancel()
	}
	if !c.nc.IsConnected() {
		return c.notConnected("call " + subject)
	}
	dl, _ := ctx.Deadline()
	start := time.Now()
	wait := dl.Sub(start)
	if wait <= 0 {
		// Nothing is sent: a handler would get no time to answer in.
		return &unavailableError{
			msg:   fmt.Sprintf("call %s not sent: the caller's deadline passed %s before it", subject, roundDuration(-wait)),
			cause: context.DeadlineExceeded,
		}
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(TimeoutHeader, strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
	if id := RequestID(ctx); id != "" {
		msg.Header.Set(RequestIDHeader, id)
	}

	// An answer sent while this connection is down is lost for good: stop
	// waiting at the first disconnection rather than at the deadline.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if d := attemptTimeout(ctx); d > 0 && d < wait {
		t := time.AfterFunc(d, func() { cancel(ErrNoAnswerYet) })
		defer t.Stop()
	}
	lost := c.lostSignal()
	go func() {
		select {
		case <-lost:
			cancel(ErrConnectionLost)
		case <-rctx.Done():
		}
	}()
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), ErrConnectionLost) {
			return &unavailableError{
				msg:       fmt.Sprintf("call %s: connection to the bus lost while waiting for the answer", subject),
				delivered: true,
				cause:     ErrConnectionLost,
			}
		}
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), ErrNoAnswerYet) {
			return &unavailableError{
				msg:       fmt.Sprintf("call %s: no answer within %s (the attempt time); the answer may be lost", subject, roundDuration(attemptTimeout(ctx))),
				delivered: true,
				cause:     ErrNoAnswerYet,
			}
		}
		return c.callError(ctx, subject, wait, err)
	}
	var env envelope
	if err := json.Unmarshal(reply.Data, &env); err != nil {
		return fmt.Errorf("bus: call %s: malformed reply: %w", subject, err)
	}
	if env.Error != nil {
		code := env.Error.Code
		if code == "" {
			code = CodeInternal
		}
		return &RemoteError{Code: code, Message: env.Error.Message}
	}
	if resp != nil && len(env.Result) > 0 {
		if err := json.Unmarshal(env.Result, resp); err != nil {
			return fmt.Errorf("bus: call %s: decode result: %w", subject, err)
		}
	}
	return nil
}

func (c *Conn) callError(ctx context.Context, subject string, wait time.Duration, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &unavailableError{msg: fmt.Sprintf("no agent answered on %s: nobody is listening", subject), cause: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return &unavailableError{
			msg:       fmt.Sprintf("no agent answered on %s within %s", subject, roundDuration(wait)),
			delivered: true,
			cause:     context.DeadlineExceeded,
		}
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("bus: call %s: %w", subject, err)
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return c.notConnected("call " + subject)
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return &unavailableError{
			msg:       fmt.Sprintf("call %s: connection to the bus lost while waiting for the answer (%v)", subject, err),
			delivered: true,
			cause:     ErrConnectionLost,
		}
	}
	return fmt.Errorf("bus: call %s: %w", subject, err)
}

// Cast sends msg (marshalled to JSON) to the handler of subject without
// waiting for it to be handled: fire and forget, at most once. It flushes
// the connection, so a nil error means the NATS server accepted the
// message, not that any handler received it (see the package comment).
func (c *Conn) Cast(ctx context.Context, subject string, msg any) error {
	return c.send(ctx, "cast to", subject, msg)
}

// Publish sends the notification v (marshalled to JSON) on subject, with the
// same guarantees as Cast.
func (c *Conn) Publish(ctx context.Context, subject string, v any) error {
	return c.send(ctx, "publish on", subject, v)
}

func (c *Conn) send(ctx context.Context, what, subject string, v any) error {
	what += " " + subject
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bus: %s: encode: %w", what, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bus: %s: %w", what, err)
	}
	if !c.nc.IsConnected() {
		return c.notConnected(what)
	}
	if err := c.nc.Publish(subject, body); err != nil {
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			return c.notConnected(what)
		}
		return fmt.Errorf("bus: %s: %w", what, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultFlushTimeout)
		defer cancel()
	}
	// FlushWithContext refuses a context without a deadline.
	if err := c.nc.FlushWithContext(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("bus: %s: not confirmed: %w", what, err)
		}
		return &unavailableError{
			msg:       fmt.Sprintf("%s: not confirmed by the bus: %v", what, err),
			delivered: true, // unknown
			cause:     err,
		}
	}
	return nil
}

// Handle serves the calls and casts sent to subject with h. With a
// non-empty queue, each message goes to one member of the queue group
// (on any connection); with "" every handler of the subject gets it. Each
// message is handled in its own goroutine. A call is answered with the
// envelope; a cast's result is dropped and its error logged. A panic in h
// is recovered and answered as a CodeInternal error. When Handle returns,
// the server knows the subscription (unless the connection is down; it is
// then registered on reconnection).
func (c *Conn) Handle(subject, queue string, h Handler) (Subscription, error) {
	subs, err := c.HandleAll(map[string]Handler{subject: h}, queue)
	if err != nil {
		return nil, err
	}
	return subs[0], nil
}

// HandleAll is Handle for several subjects at once (handlers by subject),
// with one wait for the server's confirmation rather than one per
// subject: an agent serves some thirty methods, and at thousands of
// agents starting on a loaded server each round trip can take seconds.
// On an error no subscription is left.
func (c *Conn) HandleAll(handlers map[string]Handler, queue string) ([]Subscription, error) {
	subs := make([]Subscription, 0, len(handlers))
	undo := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for subject, h := range handlers {
		s := newSubscription()
		if err := c.subscribeUnconfirmed(s, subject, queue, func(m *nats.Msg) {
			s.wg.Add(1)
			go c.serve(s, subject, h, m)
		}); err != nil {
			undo()
			return nil, err
		}
		subs = append(subs, s)
	}
	if err := c.confirmSubscription(); err != nil {
		undo()
		return nil, fmt.Errorf("bus: subscribe to %d subjects: %w", len(handlers), err)
	}
	return subs, nil
}

func (c *Conn) serve(s *subscription, subject string, h Handler, m *nats.Msg) {
	defer s.wg.Done()
	var first *dedupeEntry
	if id := m.Header.Get(RequestIDHeader); id != "" && m.Reply != "" {
		e, isFirst := c.dedupe.claim(subject, id)
		if !isFirst {
			// The caller lost the connection while waiting and asks again:
			// answer with the first run's answer, never run it twice.
			c.repeats.Add(1)
			if ok, more := c.limit.allow("repeated call " + subject); ok {
				// An overloaded server gets them by the thousand: one
				// line per subject and logEvery (RepeatedCalls counts).
				c.log.Info("repeated call answered without running it again", "subject", subject, "request_id", id, "more_like_it", more)
			}
			select {
			case <-e.done:
			case <-c.ctx.Done():
				return
			}
			c.respond(subject, m, e.reply)
			return
		}
		first = e
	}
	ctx, cancel := c.handlerContext(m)
	defer cancel()
	ctx = context.WithValue(ctx, subjectKey{}, m.Subject)
	result, err := c.invoke(ctx, subject, h, m.Data)
	if first != nil {
		first.finish(c.encodeReply(subject, result, err))
	}
	if err != nil && m.Reply != "" && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller's deadline has passed (the handler's is the same,
		// rounded down to the millisecond): it has given up, or is about
		// to, and reports the timeout itself. Answering "deadline
		// exceeded" would race with that and look like a remote failure.
		c.log.Debug("handler failed after the caller's deadline; not answering", "subject", subject, "err", err)
		return
	}
	if m.Reply == "" {
		if err != nil {
			c.log.Warn("cast handler failed", "subject", subject, "code", ErrorCode(err), "err", err)
		}
		return
	}
	reply := c.encodeReply(subject, result, err)
	if first != nil {
		reply = first.reply
	}
	c.respond(subject, m, reply)
}

func (c *Conn) respond(subject string, m *nats.Msg, reply []byte) {
	if err := m.Respond(reply); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			c.log.Debug("reply dropped: connection closed", "subject", subject)
		} else if ok, more := c.limit.allow("cannot send reply " + subject); ok {
			// A dropped connection loses thousands at once: one line
			// per subject and logEvery (2,636 lines in one second at
			// 5,481 agents).
			c.log.Warn("cannot send reply", "subject", subject, "err", err, "more_like_it", more)
		}
	}
}

func (c *Conn) handlerContext(m *nats.Msg) (context.Context, context.CancelFunc) {
	if v := m.Header.Get(TimeoutHeader); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return context.WithTimeout(c.ctx, time.Duration(ms)*time.Millisecond)
		}
	}
	return context.WithCancel(c.ctx)
}

func (c *Conn) invoke(ctx context.Context, subject string, h Handler, data []byte) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panicked", "subject", subject, "panic", r, "stack", string(debug.Stack()))
			result, err = nil, WithCode(CodeInternal, fmt.Errorf("handler for %s panicked: %v", subject, r))
		}
	}()
	return h(ctx, json.RawMessage(data))
}

func (c *Conn) encodeReply(subject string, result any, err error) []byte {
	var env envelope
	if err == nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			c.log.Error("cannot encode result", "subject", subject, "err", merr)
			err = fmt.Errorf("encode result of %s: %w", subject, merr)
		} else {
			env.Result = b
		}
	}
	if err != nil {
		env = envelope{Error: errorBody(err)}
	}
	body, merr := json.Marshal(env)
	if merr == nil && int64(len(body)) > c.nc.MaxPayload() {
		merr = fmt.Errorf("reply of %d bytes exceeds the bus's maximum payload of %d", len(body), c.nc.MaxPayload())
	}
	if merr != nil {
		c.log.Error("cannot send reply", "subject", subject, "err", merr)
		body, _ = json.Marshal(envelope{Error: &wireError{Code: CodeInternal, Message: merr.Error()}})
	}
	return body
}

func errorBody(err error) *wireError {
	msg := err.Error()
	var re *RemoteError
	if errors.As(err, &re) && re == err {
		msg = re.Message // forwarded as is: don't prefix "remote <code>: " again
	}
	return &wireError{Code: ErrorCode(err), Message: msg}
}

// Subscribe delivers the notifications published on subject (wildcards
// allowed) to fn, one at a time in arrival order. A panic in fn is logged
// and the subscription goes on. Like Handle, it returns once the server
// knows the subscription. Notifications are at most once: a subscriber that
// is down, or too slow (nats.go drops messages beyond its pending limits and
// logs a slow-consumer error), misses them.
func (c *Conn) Subscribe(subject string, fn func(data json.RawMessage)) (Subscription, error) {
	s, err := c.subscribe(newSubscription(), subject, "", func(m *nats.Msg) {
		defer func() {
			if r := recover(); r != nil {
				c.log.Error("notification subscriber panicked", "subject", m.Subject, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		fn(json.RawMessage(m.Data))
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
