package bus

import (
	"strings"
	"sync"
	"time"
)

// logEvery is how often a log line of one kind that can repeat per
// connection or per call (a NATS connection's slow read loop, a repeated
// call) is written: the first at once, then at most one per logEvery with
// the count of those left out since. At thousands of agents such lines
// come in floods exactly when the server is behind, and each one waits
// for the log's lock and write: the embedded server's read loops, which
// log while they hold their connection, then stall on the log itself.
const logEvery = 10 * time.Second

// logLimit lets one log line of each kind through per interval and counts
// the others. It never waits on the log: a caller that is not let through
// returns at once.
type logLimit struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*limitedKind
}

type limitedKind struct {
	next       time.Time // when the next line of this kind is let through
	suppressed int       // lines left out since the last one let through
}

func newLogLimit(every time.Duration, now func() time.Time) *logLimit {
	return &logLimit{every: every, now: now, kinds: map[string]*limitedKind{}}
}

// allow tells whether a line of kind may be written now and, if so, how
// many of its kind were left out since the last one written.
func (l *logLimit) allow(kind string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		k = &limitedKind{}
		l.kinds[kind] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		return false, 0
	}
	suppressed, k.suppressed = k.suppressed, 0
	k.next = now.Add(l.every)
	return true, suppressed
}

// natsLogKind is the kind of an embedded server's log line: its format
// without the client's prefix (address, client id, name, user), which
// nats-server puts before the last " - ", so that one warning about many
// connections is one kind.
func natsLogKind(format string) string {
	if i := strings.LastIndex(format, " - "); i >= 0 {
		return format[i+len(" - "):]
	}
	return format
}
