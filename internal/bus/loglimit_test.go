package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// countingHandler keeps the records it is handed.
type countingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

func (h *countingHandler) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records
	h.records = nil
	return r
}

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestServerLogLimitsConnectionFloods: the embedded server's warning
// about many connections at once (each read loop that took over 2 s logs
// "Readloop processing time", prefixed with its client) is written once
// per logEvery with the count left out, not once per connection. At 4,400
// agents on a loaded machine 1,564 read loops waited for the log's lock at
// once, their connections' PINGs unanswered for over 10 s, and the agents
// starting then failed ("subscribe …: nats: timeout"). Failed before: 300
// records.
func TestServerLogLimitsConnectionFloods(t *testing.T) {
	h := &countingHandler{}
	clock := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	l := &serverLogger{log: slog.New(h), limit: newLogLimit(logEvery, clock.now)}
	const conns = 300
	flood := func(format string, log func(string, ...any)) {
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// As nats-server's client.format: the client's description,
				// then the format.
				client := fmt.Sprintf(`127.0.0.1:%d - cid:%d - "v1.55.0:go:keel-agent-h%05d" - "$G/user:agent-h%05d"`, 30000+i, i+1, i, i)
				log(client+" - "+format, 2500*time.Millisecond)
			}()
		}
		wg.Wait()
	}
	flood("Readloop processing time: %v", l.Warnf)
	if got := h.take(); len(got) != 1 || got[0].Level != slog.LevelWarn {
		t.Fatalf("%d connections' read-loop warnings wrote %d records, want 1 warning", conns, len(got))
	}
	// Another kind is not held back by the first.
	flood("Slow Consumer Detected: WriteDeadline of %v exceeded", l.Errorf)
	if got := h.take(); len(got) != 1 || got[0].Level != slog.LevelError {
		t.Fatalf("%d connections' errors wrote %d records, want 1 error", conns, len(got))
	}
	l.Warnf("%s - Readloop processing time: %v", "127.0.0.1:1 - cid:1", time.Second)
	if got := h.take(); len(got) != 0 {
		t.Fatalf("a warning within %s of the last of its kind was written: %v", logEvery, got[0].Message)
	}
	clock.add(logEvery)
	l.Warnf("%s - Readloop processing time: %v", "127.0.0.1:1 - cid:1", time.Second)
	got := h.take()
	if len(got) != 1 {
		t.Fatalf("a warning %s after the last of its kind wrote %d records, want 1", logEvery, len(got))
	}
	more := int64(-1)
	got[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "more_like_it" {
			more = a.Value.Int64()
		}
		return true
	})
	if more != conns {
		t.Errorf("the next warning says %d more like it, want the %d left out", more, conns)
	}
}

func TestNATSLogKind(t *testing.T) {
	for format, want := range map[string]string{
		`127.0.0.1:5 - cid:7 - "x" - "$G/user:agent-h1" - Readloop processing time: %v`: "Readloop processing time: %v",
		"Server is ready": "Server is ready",
	} {
		if got := natsLogKind(format); got != want {
			t.Errorf("natsLogKind(%q) = %q, want %q", format, got, want)
		}
	}
}
