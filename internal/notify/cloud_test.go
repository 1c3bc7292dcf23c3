package notify_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/bus"
	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/notify"
	"keel/internal/testenv"
)

// TestCloudNotifies runs a real keel (server, bus, two agents), boots a
// server, live-migrates it, disables a service and deletes the server,
// and reads what keel's bus carried on keel.notify.>: the events of each
// flow in order, the instance's host following it, and every message
// decoded by Nova's own classes.
func TestCloudNotifies(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	ctx := t.Context()
	conn, err := bus.Connect(ctx, cloud.Server.BusURL(), cloud.Server.Credentials(), "notify-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mu sync.Mutex
	var msgs []notify.Message
	var raw [][]byte
	sub, err := conn.Subscribe(bus.NotificationSubject(">"), func(data json.RawMessage) {
		var m notify.Message
		var probe struct {
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &m) != nil || json.Unmarshal(data, &probe) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, m)
		// The message again, enveloped as it goes to RabbitMQ.
		b, _ := json.Marshal(map[string]string{"oslo.version": "2.0", "oslo.message": string(data)})
		raw = append(raw, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	c := cloud.Connect(t)
	srv, err := c.CreateServer(ctx, "vm1", "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	srv, err = c.WaitServer(ctx, srv.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil || srv.Status != "ACTIVE" {
		t.Fatalf("boot: %+v %v", srv, err)
	}
	src := srv.Host
	w, err := c.LiveMigrate(ctx, srv.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Wait(ctx, 20*time.Millisecond, nil); err != nil || m.Status != "completed" {
		t.Fatalf("live migration: %+v %v", m, err)
	}
	if err := c.DeleteServer(ctx, srv.ID); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, done func([]notify.Message) bool) {
		t.Helper()
		waitCtx := testenv.Context(t)
		for {
			mu.Lock()
			ok := done(msgs)
			mu.Unlock()
			if ok {
				return
			}
			if waitCtx.Err() != nil {
				t.Fatalf("no %s before the test's time ran out; got %v", what, typesOf(msgs, ""))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("instance.delete.end", func(ms []notify.Message) bool {
		return slices.Contains(typesOf(ms, srv.ID), "instance.delete.end")
	})

	mu.Lock()
	got := typesOf(msgs, srv.ID)
	mu.Unlock()
	// The flows' milestones, in order (instance.update in between).
	want := []string{"instance.create.start", "instance.create.end",
		"instance.live_migration_pre.start", "instance.live_migration_pre.end",
		"instance.live_migration_post.start", "instance.live_migration_post_dest.start",
		"instance.live_migration_post_dest.end", "instance.live_migration_post.end",
		"instance.delete.start", "instance.delete.end"}
	var milestones []string
	for _, e := range got {
		if e != "instance.update" {
			milestones = append(milestones, e)
		}
	}
	if !slices.Equal(milestones, want) {
		t.Errorf("events of %s:\n got %v\nwant %v", srv.ID, milestones, want)
	}
	// Where the instance is, as a consumer following instance.update sees it.
	mu.Lock()
	var hosts []string
	for _, m := range msgs {
		d := m.Payload.Data.(map[string]any)
		if m.EventType == "instance.update" && d["uuid"] == srv.ID && d["task_state"] == nil {
			hosts = append(hosts, d["host"].(string))
		}
	}
	bodies := slices.Clone(raw)
	mu.Unlock()
	if len(hosts) < 2 || hosts[0] != src || hosts[len(hosts)-1] == src {
		t.Errorf("instance.update hosts %v: want %s, then the destination", hosts, src)
	}
	for i, r := range notify.DecodeWithNova(t, bodies) {
		if !strings.HasPrefix(r, "ok ") {
			t.Errorf("message %d: %s", i, r)
		}
	}
}

func typesOf(ms []notify.Message, uuid string) []string {
	var out []string
	for _, m := range ms {
		d, _ := m.Payload.Data.(map[string]any)
		if uuid == "" || d["uuid"] == uuid {
			out = append(out, m.EventType)
		}
	}
	return out
}
