package bus

import (
	"fmt"
	"strings"
	"unicode"
)

const subjectPrefix = "keel"

// ComputeSubject is the subject of method on the compute agent of host:
// "keel.compute.<host>.<method>". host must pass ValidHostName.
func ComputeSubject(host, method string) string {
	return subjectPrefix + ".compute." + host + "." + method
}

// ConductorSubject is the subject of method on the conductor:
// "keel.conductor.<method>".
func ConductorSubject(method string) string {
	return subjectPrefix + ".conductor." + method
}

// NotificationSubject is the subject of a notification: "keel.notify.<event>".
func NotificationSubject(event string) string {
	return subjectPrefix + ".notify." + event
}

// ValidHostName reports whether name can be used as one subject token, that
// is as the <host> of ComputeSubject: it must be non-empty and contain no
// '.', '*', '>', white space or control characters.
func ValidHostName(name string) error {
	if name == "" {
		return fmt.Errorf("bus: empty host name")
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r)
	}); i >= 0 {
		return fmt.Errorf("bus: host name %q: %q is not allowed in a host name (it must be a single NATS subject token; use the short name, not the FQDN)", name, []rune(name[i:])[0])
	}
	return nil
}

// AgentConductorSubject is the subject of method on the conductor as
// called by host's agent: "keel.conductor.<host>.<method>". The servers
// subscribe with host "*" and read the sender from the subject
// (ConductorSender); an agent may publish with its own host only.
func AgentConductorSubject(host, method string) string {
	return AgentConductorPrefix(host) + "." + method
}

// ConductorSender is the host token of an AgentConductorSubject, or "" if
// subject is not one.
func ConductorSender(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != subjectPrefix || parts[1] != "conductor" {
		return ""
	}
	return parts[2]
}
