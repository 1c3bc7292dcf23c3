package notify

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"keel/internal/records"
	"keel/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRabbit runs Debian's RabbitMQ on 127.0.0.1:port, with a node name,
// an Erlang distribution port and an epmd of its own (so it never meets
// another test's or helper's RabbitMQ), and stops both by PID at the end
// of the test. It returns once the broker takes AMQP connections.
func startRabbit(t *testing.T, port int) (stop func()) {
	t.Helper()
	testenv.External(t, "RabbitMQ (Debian's rabbitmq-server)")
	const server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(server); err != nil {
		t.Fatal("RabbitMQ is not installed (apt-get install rabbitmq-server; .ci/run does):", err)
	}
	dir := t.TempDir()
	epmdPort, distPort := freePort(t), freePort(t)
	epmd := exec.Command("/usr/bin/epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	if err := epmd.Start(); err != nil {
		t.Fatal("starting epmd:", err)
	}
	conf := filepath.Join(dir, "rabbitmq.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users.guest = true\n", port)), 0o600)
	os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "env.conf"), nil, 0o600)
	cmd := exec.Command(server)
	cmd.Env = append(os.Environ(),
		"HOME="+dir, "RUNNING_UNDER_SYSTEMD=true",
		fmt.Sprintf("RABBITMQ_NODENAME=keelnotify%d-%d@localhost", os.Getpid(), port),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1", "RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort), "ERL_EPMD_PORT="+strconv.Itoa(epmdPort), "ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_CONFIG_FILE="+conf, "RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"), "RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"), "RABBITMQ_LOGS=-")
	log, _ := os.Create(filepath.Join(dir, "rabbit.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		epmd.Process.Kill()
		t.Fatal("starting RabbitMQ:", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		epmd.Process.Kill()
		epmd.Wait()
	}
	t.Cleanup(stop)
	url := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)
	// Erlang's start takes seconds on a quiet machine and minutes at a
	// load of 30: wait while it runs, bounded by go test's -timeout, with
	// a progress line every 30 s.
	ctx, began, said := testenv.Context(t), time.Now(), time.Now()
	for {
		c, err := amqp.Dial(url)
		if err == nil {
			c.Close()
			return stop
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "rabbit.log"))
			t.Fatalf("RabbitMQ exited:\n%s", b)
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(dir, "rabbit.log"))
			t.Fatalf("RabbitMQ did not take connections in %s: %v\n%s", time.Since(began).Round(time.Second), err, b)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(said) > 30*time.Second {
			t.Logf("RabbitMQ still starting after %s (load %s)", time.Since(began).Round(time.Second), loadAvg())
			said = time.Now()
		}
	}
}

// loadAvg is the first field of /proc/loadavg, for progress lines.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// numbered is an instance.update event whose instance is named vmN.
func numbered(n int) Event {
	in := vm
	in.Name, in.Host = fmt.Sprintf("vm%d", n), "h1"
	old := in
	old.TaskState = records.TaskSpawning
	return InstanceChange(src, &old, &in)[0]
}

// receive reads n messages from queue and returns their instances' names,
// checking each is a messagingv2 envelope.
func receive(t *testing.T, url, queue string, n int) []string {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// As an oslo.messaging listener does: the same queue and binding the
	// notifier declares (whichever comes first creates them).
	if err := ch.ExchangeDeclare("nova", "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, queue, "nova", false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	timeout := testenv.Context(t).Done()
	for len(names) < n {
		select {
		case d := <-deliveries:
			var env map[string]string
			var m struct {
				EventType string `json:"event_type"`
				Publisher string `json:"publisher_id"`
				Payload   struct {
					Data map[string]any `json:"nova_object.data"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(d.Body, &env); err != nil || env["oslo.version"] != "2.0" || d.ContentType != "application/json" {
				t.Fatalf("not a messagingv2 envelope (%s, %v): %s", d.ContentType, err, d.Body)
			}
			if err := json.Unmarshal([]byte(env["oslo.message"]), &m); err != nil || m.EventType != "instance.update" || m.Publisher != "nova-compute:h1" {
				t.Fatalf("message %s: %v", env["oslo.message"], err)
			}
			names = append(names, m.Payload.Data["display_name"].(string))
		case <-timeout:
			t.Fatalf("received %d of %d messages: %v", len(names), n, names)
		}
	}
	return names
}

// TestRabbitDownThenUp: with the broker down, Emit never blocks; the
// queue keeps the first events, drops the rest and counts them; once the
// broker is up the kept events arrive, in order, in the queue oslo's
// notifier declares (versioned_notifications.info on exchange nova).
func TestRabbitDownThenUp(t *testing.T) {
	port := freePort(t)
	url := fmt.Sprintf("rabbit://guest:guest@127.0.0.1:%d/", port)
	sink, err := NewRabbitSink(RabbitOptions{URL: url, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const size, total = 10, 30
	n := New(nil, size, sink)
	defer n.Close()
	for i := range total {
		n.Emit(numbered(i)) // a blocking Emit hangs the test here
	}
	c := n.Counts()[0]
	// The sender holds one in hand, retrying; the queue holds size.
	if c.Dropped < total-size-1 || c.Dropped > total-size || c.Sent != 0 {
		t.Fatalf("broker down: %+v, want %d or %d dropped, none sent", c, total-size-1, total-size)
	}
	kept := total - int(c.Dropped)
	startRabbit(t, port)
	got := receive(t, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port), "versioned_notifications.info", kept)
	// The first size are never dropped (they fill the queue); which of
	// the next ones were kept depends on when the sender took the first;
	// whatever arrives, arrives in the order emitted.
	last := -1
	for i, name := range got {
		var k int
		fmt.Sscanf(name, "vm%d", &k)
		if k <= last || (i < size && k != i) {
			t.Fatalf("received %v: want vm0…vm%d first, all in the order emitted", got, size-1)
		}
		last = k
	}
	for i := range 5 {
		n.Emit(numbered(100 + i))
	}
	got = receive(t, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port), "versioned_notifications.info", 5)
	if fmt.Sprint(got) != "[vm100 vm101 vm102 vm103 vm104]" {
		t.Errorf("with the broker up: %v", got)
	}
	ctx := testenv.Context(t)
	for n.Counts()[0].Sent != int64(kept+5) {
		select {
		case <-ctx.Done():
			t.Fatalf("counts %+v, want %d sent", n.Counts()[0], kept+5)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestParseTransportURL(t *testing.T) {
	got, err := ParseTransportURL("rabbit://u:p@10.0.0.1,u:p@10.0.0.2:5673/nova?ssl=0")
	if err != nil || fmt.Sprint(got) != "[amqp://u:p@10.0.0.1:5672/nova amqp://u:p@10.0.0.2:5673/nova]" {
		t.Errorf("got %v %v", got, err)
	}
	for _, bad := range []string{"kafka://x:9092/", "rabbit:///", "rabbit://"} {
		if _, err := ParseTransportURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
