package bus

import (
	"testing"
	"time"
)

// TestDedupeExpiry: a finished request is remembered for DedupeWindow,
// then forgotten; one still running is never forgotten.
func TestDedupeExpiry(t *testing.T) {
	now := time.Unix(0, 0)
	d := &dedupe{now: func() time.Time { return now }}
	running, first := d.claim("s", "a")
	if !first {
		t.Fatal("first claim of a is not first")
	}
	done, _ := d.claim("s", "b")
	done.finish([]byte("b's answer"))
	if e, first := d.claim("s", "b"); first || string(e.reply) != "b's answer" {
		t.Fatalf("repeat of b: first=%v reply %q; want the kept answer", first, e.reply)
	}
	other, first := d.claim("t", "b")
	if !first {
		t.Fatal("the same id on another subject is a repeat; want a new request")
	}
	other.finish(nil)
	now = now.Add(DedupeWindow + time.Second)
	d.claim("s", "c") // expires what it can
	if _, first := d.claim("s", "a"); first {
		t.Fatal("a still running was forgotten")
	}
	running.finish(nil)
	now = now.Add(DedupeWindow + time.Second)
	d.claim("s", "d")
	if _, first := d.claim("s", "b"); !first {
		t.Fatal("b remembered past the window")
	}
	if n := d.size(); n > 3 {
		t.Errorf("%d entries kept after expiry, want at most 3", n)
	}
}
