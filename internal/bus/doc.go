// Package bus is keel's message bus: RPC call/cast between the conductor
// (keel server) and the compute agents, agent to agent, and notifications,
// carried over NATS.
//
// keel server embeds a NATS server (StartServer) bound to 127.0.0.1 by
// default and protected by the servers' user/password pair kept in
// DATA_DIR/bus-credentials.json (LoadOrCreateCredentials). Every agent has
// an identity of its own, "agent-<host>", derived from it
// (AgentCredentials), with AgentPermissions: its own subjects and inbox to
// subscribe, its own conductor prefix and the peer checks to publish.
// Agents are given their own file (keel agent enroll) or the servers' (from
// which they derive theirs, Credentials.ForAgent) and the URL, or the URLs
// of an external NATS cluster, comma-separated (configured with
// AuthorizationConfig). Connect reconnects forever.
//
// # Subjects
//
//	keel.compute.<host>.<method>   calls and casts to one compute agent (ComputeSubject)
//	keel.conductor.<host>.<method> an agent's calls and casts to the conductor (AgentConductorSubject)
//	keel.notify.<event>            notifications (NotificationSubject)
//
// A host name is one subject token: ValidHostName refuses names containing
// '.', '*', '>' or white space (so a host is named by its short name, not
// its FQDN).
//
// # Envelope
//
// Requests, casts and notifications are JSON documents. A call's reply is
// always an envelope:
//
//	{"result": <the handler's result>}
//	{"error": {"code": "not_found", "message": "instance 42 not found"}}
//
// A call carries its remaining time in the Keel-Timeout-Ms header; the
// handler's context gets that deadline, so a handler can give up when the
// caller has.
//
// # Error codes
//
// A handler returns an ordinary error. Its code is ErrorCode(err): the
// RPCCode() of the first error in its chain that has one (WithCode attaches
// one), otherwise CodeInternal. A panicking handler answers CodeInternal and
// the agent keeps serving. On the calling side the error comes back as a
// *RemoteError carrying Code and Message; IsCode tests it. A *RemoteError
// has an RPCCode too, so a handler that returns an error from a nested Call
// forwards the original code.
//
// A call nobody answered is not a RemoteError: it wraps ErrUnavailable
// (code CodeUnavailable). It also wraps ErrNotDelivered when the bus knows
// no handler received the request (no subscriber on the subject, or the
// connection was down), so it is safe to retry or give up; after a timeout
// (it then wraps context.DeadlineExceeded) the handler may have run.
//
// # Repeated calls
//
// A call whose connection goes down while it waits (a NATS restart, a
// cluster node lost) fails at once, wrapping ErrUnavailable and
// ErrConnectionLost, not at its deadline: the answer, if any, is lost. The
// handler may or may not have run. A caller that puts a request id in the
// context (WithRequestID; Keel-Request-Id header) may send the call again
// with the same id once reconnected: the handling Conn remembers each id
// it received, per subject, for DedupeWindow, and answers a repeat with
// the first run's answer, waiting for it if the handler still runs. So a
// retried step never runs twice. An answer can also be lost without the
// caller's connection breaking (the cluster node the handler's side used
// went down): WithAttempt bounds how long one attempt waits (the error
// then wraps ErrNoAnswerYet) while the handler keeps the call's whole
// deadline, so the caller repeats the call rather than wait it out. The
// memory is per connection: a repeat
// that reaches another member of a queue group is handled again (the
// conductor's handlers are idempotent against the store for that reason).
//
// # What Cast guarantees
//
// Cast and Publish are fire and forget, at most once. A nil error means the
// NATS server accepted the message (the connection was flushed), not that
// an agent received or acted on it: there is no acknowledgement, no
// persistence and no redelivery (no JetStream). A message published while
// the connection is down is refused (ErrUnavailable), never buffered for a
// later reconnect. So nothing may depend on a cast having been delivered:
// the migration record in the store is what recovery trusts, and the
// conductor and agents reconcile against it.
package bus
