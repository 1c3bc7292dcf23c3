package notify

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Sink sends notifications somewhere. Send returns once the notification
// is taken (a broker confirmed it); an error means it was not and the
// notifier sends it again.
type Sink interface {
	// Name names the sink in logs and metrics (bus, rabbit).
	Name() string
	Send(ctx context.Context, m Message) error
	Close()
}

// Message is an Event as it goes on the wire: oslo.messaging's
// notification message (before the messagingv2 envelope).
type Message struct {
	MessageID   string `json:"message_id"`
	PublisherID string `json:"publisher_id"`
	EventType   string `json:"event_type"`
	Priority    string `json:"priority"`
	Payload     Object `json:"payload"`
	// Timestamp is oslo's: str(utcnow()), "2026-12-06 05:04:47.123456".
	Timestamp string `json:"timestamp"`
}

func message(e Event) Message {
	return Message{
		MessageID: uuid.NewString(), PublisherID: e.Publisher, EventType: e.EventType,
		Priority: e.Priority, Payload: e.Payload,
		Timestamp: e.Time.UTC().Format("2006-01-02 15:04:05.000000"),
	}
}

// DefaultQueueSize is how many notifications wait for a sink that is down
// or slow before the newest are dropped.
const DefaultQueueSize = 10000

// Notifier hands events to its sinks, each through a bounded queue of its
// own drained by a goroutine of its own, so a slow sink delays nothing but
// itself. Emit never blocks.
type Notifier struct {
	log    *slog.Logger
	queues []*queue
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

type queue struct {
	sink    Sink
	ch      chan Message
	sent    atomic.Int64
	dropped atomic.Int64
	retries atomic.Int64
}

// Counts are a sink's totals since start.
type Counts struct {
	Sink                   string
	Sent, Dropped, Retries int64
	Queued                 int
}

// New starts a notifier over sinks; size bounds each sink's queue
// (DefaultQueueSize if 0). Close stops it.
func New(log *slog.Logger, size int, sinks ...Sink) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	if size <= 0 {
		size = DefaultQueueSize
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{log: log, cancel: cancel}
	for _, s := range sinks {
		q := &queue{sink: s, ch: make(chan Message, size)}
		n.queues = append(n.queues, q)
		n.wg.Add(1)
		go n.drain(ctx, q)
	}
	return n
}

// Emit queues events for every sink, in order. A sink whose queue is full
// drops the event; the drop is counted and logged.
func (n *Notifier) Emit(events ...Event) {
	if n == nil {
		return
	}
	for _, e := range events {
		m := message(e)
		for _, q := range n.queues {
			select {
			case q.ch <- m:
			default:
				if d := q.dropped.Add(1); d == 1 || d%1000 == 0 {
					n.log.Warn("notification queue full: dropping notifications", "sink", q.sink.Name(),
						"event_type", m.EventType, "dropped_total", d, "queue_size", cap(q.ch))
				}
			}
		}
	}
}

// drain sends q's messages in order, each until the sink takes it.
func (n *Notifier) drain(ctx context.Context, q *queue) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-q.ch:
			backoff := 100 * time.Millisecond
			for {
				err := q.sink.Send(ctx, m)
				if err == nil {
					q.sent.Add(1)
					break
				}
				if ctx.Err() != nil {
					return
				}
				if r := q.retries.Add(1); r == 1 || r%100 == 0 {
					n.log.Warn("sending a notification failed; retrying", "sink", q.sink.Name(), "event_type", m.EventType, "err", err, "retries_total", r)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
			}
		}
	}
}

// Counts returns each sink's totals.
func (n *Notifier) Counts() []Counts {
	if n == nil {
		return nil
	}
	out := make([]Counts, len(n.queues))
	for i, q := range n.queues {
		out[i] = Counts{Sink: q.sink.Name(), Sent: q.sent.Load(), Dropped: q.dropped.Load(), Retries: q.retries.Load(), Queued: len(q.ch)}
	}
	return out
}

// Close stops sending (what is still queued is dropped) and closes the
// sinks.
func (n *Notifier) Close() {
	if n == nil {
		return
	}
	n.cancel()
	n.wg.Wait()
	for _, q := range n.queues {
		q.sink.Close()
	}
}

// Publisher is keel's bus as a sink: each message on
// keel.notify.<event_type> (bus.NotificationSubject).
type Publisher interface {
	Publish(ctx context.Context, subject string, v any) error
}

// BusSink publishes on keel's own bus.
type BusSink struct {
	Bus     Publisher
	Subject func(event string) string
}

// Name implements Sink.
func (BusSink) Name() string { return "bus" }

// Send implements Sink.
func (s BusSink) Send(ctx context.Context, m Message) error {
	return s.Bus.Publish(ctx, s.Subject(m.EventType), m)
}

// Close implements Sink.
func (BusSink) Close() {}

// Body is m as oslo.messaging's messagingv2 driver sends it: the
// {"oslo.version": "2.0", "oslo.message": "<m as JSON>"} envelope.
func (m Message) Body() ([]byte, error) { return envelope(m) }

// envelope is oslo.messaging's messagingv2 envelope of m.
func envelope(m Message) ([]byte, error) {
	inner, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(inner)})
}
