package bus

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// AgentUserPrefix starts the bus user name of every agent identity: the
// agent of host h01 connects as "agent-h01".
const AgentUserPrefix = "agent-"

// peerMethods are the agent methods one agent calls on another (the
// source of a live migration asks its destination, and the reverse): the
// only agent subjects an agent may publish on besides its own.
var peerMethods = []string{"check_can_live_migrate_source", "check_incoming"}

// responseTTL is how long an agent may answer a request it received
// (nats-server's allow_responses): longer than any call's deadline.
const responseTTL = time.Hour

// AgentCredentials are the bus credentials of host's agent at epoch 0
// (AgentCredentialsAt): what a host never enrolled on its own uses.
func AgentCredentials(servers Credentials, host string) (Credentials, error) {
	return AgentCredentialsAt(servers, host, 0)
}

// AgentCredentialsAt are the bus credentials of host's agent, derived from
// the servers' credentials and the host's enrollment epoch: user
// "agent-<host>" and a password only the holder of the servers' password
// can compute (an HMAC of the host name, and of the epoch past 0). keel
// agent enroll raises a host's epoch and writes its credentials to a file:
// the files of earlier epochs are then refused, and no other host's
// credentials change.
func AgentCredentialsAt(servers Credentials, host string, epoch int64) (Credentials, error) {
	if err := servers.validate(); err != nil {
		return Credentials{}, err
	}
	if _, ok := servers.AgentHost(); ok {
		return Credentials{}, fmt.Errorf("bus: %s is an agent's identity, not the servers': it cannot issue another", servers.User)
	}
	if err := ValidHostName(host); err != nil {
		return Credentials{}, err
	}
	if epoch < 0 {
		return Credentials{}, fmt.Errorf("bus: agent identity epoch %d of %s is negative", epoch, host)
	}
	m := hmac.New(sha256.New, []byte(servers.Password))
	m.Write([]byte("keel bus agent identity\x00" + host))
	if epoch > 0 {
		m.Write([]byte("\x00epoch " + strconv.FormatInt(epoch, 10)))
	}
	return Credentials{
		User:     AgentUserPrefix + host,
		Password: base64.RawURLEncoding.EncodeToString(m.Sum(nil)),
	}, nil
}

// AgentStates tells the embedded server each host's identity state:
// its enrollment epoch (0 if never enrolled) and whether it is revoked.
type AgentStates interface {
	AgentState(ctx context.Context, host string) (epoch int64, revoked bool, err error)
}

// agentLookupTimeout bounds one AgentState call while a client connects.
const agentLookupTimeout = 5 * time.Second

// AgentHost is the host whose agent these credentials identify, and
// false for the servers' credentials.
func (c Credentials) AgentHost() (string, bool) {
	host, ok := strings.CutPrefix(c.User, AgentUserPrefix)
	return host, ok && host != ""
}

// AgentInboxPrefix is where host's agent receives the answers to its own
// calls; it may subscribe there and nowhere else but its own subjects.
func AgentInboxPrefix(host string) string { return "_INBOX." + AgentUserPrefix + host }

// AgentConductorPrefix is the subject prefix of host's reports and store
// calls to the servers: "keel.conductor.<host>". An agent may publish
// under its own prefix only, so the host token of a conductor subject is
// the sending agent's identity.
func AgentConductorPrefix(host string) string { return subjectPrefix + ".conductor." + host }

// AgentPermissions are the subjects host's agent may use: it subscribes to
// its own agent subjects and its own inbox, publishes its reports and store
// calls under its conductor prefix and the peer calls of a live migration,
// and answers the requests it received. It can neither read another
// agent's calls nor join the servers' queue group, nor call another
// agent's methods other than the peer checks.
func AgentPermissions(host string) *server.Permissions {
	pub := []string{AgentConductorPrefix(host) + ".>"}
	for _, m := range peerMethods {
		pub = append(pub, subjectPrefix+".compute.*."+m)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{ComputeSubject(host, ">"), AgentInboxPrefix(host) + ".>"}},
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: responseTTL},
	}
}

// identities is the embedded server's authentication: the servers'
// credentials get every permission, an agent's derived credentials (at
// its host's epoch, and not revoked) get AgentPermissions of their host,
// anything else is refused.
type identities struct {
	servers Credentials
	agents  AgentStates // nil: every host at epoch 0
	log     *slog.Logger
}

var _ server.Authentication = identities{}

func sameSecret(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// Check implements server.Authentication.
func (id identities) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	if o == nil {
		return false
	}
	if sameSecret(o.Username, id.servers.User) && sameSecret(o.Password, id.servers.Password) {
		c.RegisterUser(&server.User{Username: o.Username})
		return true
	}
	host, ok := Credentials{User: o.Username}.AgentHost()
	if !ok || ValidHostName(host) != nil {
		return false
	}
	var epoch int64
	if id.agents != nil {
		ctx, cancel := context.WithTimeout(context.Background(), agentLookupTimeout)
		e, revoked, err := id.agents.AgentState(ctx, host)
		cancel()
		switch {
		case err != nil:
			id.log.Warn("bus: refusing an agent whose identity cannot be checked", "host", host, "err", err)
			return false
		case revoked:
			id.log.Info("bus: refusing a revoked agent identity", "host", host)
			return false
		}
		epoch = e
	}
	want, err := AgentCredentialsAt(id.servers, host, epoch)
	if err != nil || !sameSecret(o.Password, want.Password) {
		return false
	}
	c.RegisterUser(&server.User{Username: o.Username, Permissions: AgentPermissions(host)})
	return true
}

// DisconnectAgent closes every connection of host's agent identity (after
// a revocation or a new enrollment: a reconnect is checked again) and
// returns how many there were.
func (s *Server) DisconnectAgent(host string) int {
	cz, err := s.ns.Connz(&server.ConnzOptions{User: AgentUserPrefix + host, Username: true, Limit: 1 << 16})
	if err != nil {
		return 0
	}
	n := 0
	for _, ci := range cz.Conns {
		if ci.AuthorizedUser == AgentUserPrefix+host && s.ns.DisconnectClientByID(ci.Cid) == nil {
			n++
		}
	}
	return n
}

// AuthorizationConfig is the authorization block of a nats-server
// configuration file that gives the servers' user every permission and
// each of hosts' agents (at epoch 0) its own user with AgentPermissions.
func AuthorizationConfig(servers Credentials, hosts []string) (string, error) {
	at := map[string]int64{}
	for _, h := range hosts {
		at[h] = 0
	}
	return AuthorizationConfigAt(servers, at)
}

// AuthorizationConfigAt is AuthorizationConfig for hosts at the given
// epochs: what an external NATS needs for keel's agent identities (the
// embedded server derives them itself). A host left out cannot connect.
// The passwords are in clear: keep the file 0600.
func AuthorizationConfigAt(servers Credentials, hosts map[string]int64) (string, error) {
	if err := servers.validate(); err != nil {
		return "", err
	}
	hs := make([]string, 0, len(hosts))
	for h := range hosts {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	fmt.Fprintf(&b, "    {user: %q, password: %q}\n", servers.User, servers.Password)
	for _, h := range hs {
		ac, err := AgentCredentialsAt(servers, h, hosts[h])
		if err != nil {
			return "", err
		}
		p := AgentPermissions(h)
		fmt.Fprintf(&b, "    {user: %q, password: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}, allow_responses: {max: %d, expires: %q}}}\n",
			ac.User, ac.Password, quoteList(p.Publish.Allow), quoteList(p.Subscribe.Allow), p.Response.MaxMsgs, p.Response.Expires.String())
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

type subjectKey struct{}

// MessageSubject is the subject the message being handled arrived on (a
// Handler's context carries it), "" outside a handler. A handler
// subscribed with a wildcard reads the token it matched from it.
func MessageSubject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}
