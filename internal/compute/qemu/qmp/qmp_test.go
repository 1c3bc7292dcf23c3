package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQEMU serves one QMP session on a unix socket: the greeting, then
// answers from reply (nil: never answer), after flooding events first.
func fakeQEMU(t *testing.T, events int, reply func(cmd string, args json.RawMessage) any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		w := bufio.NewWriter(c)
		fmt.Fprintln(w, `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}`)
		w.Flush()
		sc := bufio.NewScanner(c)
		negotiated := false
		for sc.Scan() {
			var req struct {
				Execute   string          `json:"execute"`
				Arguments json.RawMessage `json:"arguments"`
				ID        json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				return
			}
			if !negotiated {
				if req.Execute != "qmp_capabilities" {
					fmt.Fprintf(w, `{"error": {"class": "CommandNotFound", "desc": "Expecting capabilities negotiation with 'qmp_capabilities'"}, "id": %s}`+"\n", req.ID)
					w.Flush()
					continue
				}
				negotiated = true
				for i := 0; i < events; i++ {
					fmt.Fprintf(w, `{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "MIGRATION_PASS", "data": {"pass": %d}}`+"\n", i)
				}
				fmt.Fprintf(w, `{"return": {}, "id": %s}`+"\n", req.ID)
				w.Flush()
				continue
			}
			ans := reply(req.Execute, req.Arguments)
			if ans == nil {
				continue
			}
			msg := map[string]any{"id": req.ID}
			if e, ok := ans.(*Error); ok {
				msg["error"] = e
			} else {
				msg["return"] = ans
			}
			b, _ := json.Marshal(msg)
			w.Write(append(b, '\n'))
			w.Flush()
		}
	}()
	return path
}

func TestSession(t *testing.T) {
	path := fakeQEMU(t, 1000, func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "human-monitor-command":
			var a struct {
				Line string `json:"command-line"`
			}
			json.Unmarshal(args, &a)
			return "echo " + a.Line
		case "hang":
			return nil
		}
		return &Error{Class: "CommandNotFound", Desc: "The command " + cmd + " has not been found"}
	})
	ctx := context.Background()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 1000 events nobody read did not block the session.
	var st struct{ Status string }
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Fatalf("query-status = %+v, %v", st, err)
	}
	if out, err := c.HumanMonitor(ctx, "xp /1wx 0x1000"); err != nil || out != "echo xp /1wx 0x1000" {
		t.Fatalf("human monitor = %q, %v", out, err)
	}
	err = c.Execute(ctx, "nonsense", nil, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("unknown command: %v", err)
	}
	// A command without an answer ends at its own deadline; the session
	// goes on.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Execute(short, "hang", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("the deadline took %s", time.Since(start))
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
		t.Fatalf("after a timed-out command: %v", err)
	}
	n := 0
	for len(c.Events()) > 0 {
		ev := <-c.Events()
		if ev.Name != "MIGRATION_PASS" || ev.Timestamp.Unix() != 1 {
			t.Fatalf("event %+v", ev)
		}
		n++
	}
	if n == 0 || n > cap(c.events) {
		t.Fatalf("%d events kept, want some, at most %d", n, cap(c.events))
	}
}

func TestClosedSession(t *testing.T) {
	path := fakeQEMU(t, 0, func(cmd string, _ json.RawMessage) any { return nil })
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	c.nc.Close() // the peer goes away
	<-c.Done()
	if err := c.Execute(context.Background(), "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("command on a closed session: %v", err)
	}
	if _, err := Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock")); err == nil || !strings.Contains(err.Error(), "connecting") {
		t.Fatalf("dialing nothing: %v", err)
	}
}
