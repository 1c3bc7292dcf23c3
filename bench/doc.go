// Package bench is keel's benchmark harness and its cross-package
// benchmarks.
//
// The harness (Run, and the command bench/cmd/keelbench) measures, in one
// run, every figure docs/performance.md's table shows, each with its
// conditions: scheduler decision latency at 1,000 / 10,000 / 100,000
// hosts; decide + durable claim at 10,000 hosts on SQLite and on
// PostgreSQL (a throw-away cluster); boots and live migrations per second
// through the HTTP API with 1,000 fake-driver agents; keel side by side
// with OpenStack Placement 8.0 (Debian's python3-placement under gunicorn,
// on SQLite) and with Nova 26's scheduler code (python3-nova, driven by
// the embedded nova_sched.py); `keel sim` at 10,000 hosts × 24 hours;
// and the fleet: how many hosts one `keel server` process carries. The
// fleet section starts the server as its own process (built from this
// tree) and ramps real agents in the harness's process — each with its
// own bus identity (derived from the servers' credentials, as `keel agent
// --nats-credentials` does) and its own NATS connection, one per host as
// in a real deployment — heartbeating and auditing at Nova's intervals,
// while a client times GET /servers/detail and /os-hypervisors/detail;
// the server's CPU and memory are read from /proc/PID, apart from the
// generator's (--server-cpuprofile profiles it). The metrics section
// runs the same server and 1,000 such agents (--fleet-steps N changes
// it) and reads the server's CPU over periods with the agents'
// measured-usage reporters running and stopped in turn: the difference
// is what the reports cost.
//
//	go run ./bench/cmd/keelbench [--json|--markdown] [--quick] [--only SECTIONS]
//
// It prints figures and judges them against the goals, but fails
// only when something does not work. Its test runs the quick mode end to
// end.
//
// The Go benchmarks here (`go test -run XXX -bench . ./bench/`) time
// narrower things with the testing package.
package bench
