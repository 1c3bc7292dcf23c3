package conductor

import "errors"

// The conductor's errors: what its callers (the compute API, the CLI's
// server, the simulator) and the adapters that reach the agents for it
// (package rpc over the bus, package inproc in one process) tell apart.
// The conductor imports neither: an adapter marks its failures with
// Unreachable.

// InvalidStateError is a request the instance's state does not allow (HTTP
// 409 in the API).
type InvalidStateError struct{ Msg string }

func (e *InvalidStateError) Error() string { return e.Msg }

// BadRequestError is a request Nova answers with 400 (the API maps it).
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

// ForbiddenError is a request the caller's role does not allow (HTTP 403
// in the API): unlocking a server an admin locked.
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

// ErrAgentUnreachable is matched (errors.Is) by the error of an agent
// call that got no answer — the agent is down, restarting or cut off —
// as the ComputeAPI adapters report it through Unreachable. A lifecycle
// or cold-move step that fails so is repeated later, not ended.
var ErrAgentUnreachable = errors.New("agent unreachable")

// Unreachable marks err, the failure of an agent call that got no
// answer, as ErrAgentUnreachable; its text stays err's. nil stays nil.
func Unreachable(err error) error {
	if err == nil {
		return nil
	}
	return unreachableError{err}
}

type unreachableError struct{ err error }

func (e unreachableError) Error() string        { return e.err.Error() }
func (e unreachableError) Unwrap() error        { return e.err }
func (e unreachableError) Is(target error) bool { return target == ErrAgentUnreachable }
