package conductor

import (
	"errors"
	"net/http"
)

// The conductor's errors: what its callers (the compute API, the CLI's
// server, the simulator) and the adapters that reach the agents for it
// (package rpc over the bus, package inproc in one process) tell apart.
// The conductor imports neither: an adapter marks its failures with
// Unreachable. A refusal says with which HTTP status the API answers it
// (HTTPStatus, as Nova's exceptions carry their code), so the API tells
// them apart without importing the conductor.

// InvalidStateError is a request the instance's state does not allow (HTTP
// 409 in the API).
type InvalidStateError struct{ Msg string }

func (e *InvalidStateError) Error() string { return e.Msg }

// HTTPStatus is the status the API answers with (409).
func (e *InvalidStateError) HTTPStatus() int { return http.StatusConflict }

// BadRequestError is a request Nova answers with 400 (the API maps it).
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

// HTTPStatus is the status the API answers with (400).
func (e *BadRequestError) HTTPStatus() int { return http.StatusBadRequest }

// ForbiddenError is a request the caller's role does not allow (HTTP 403
// in the API): unlocking a server an admin locked.
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

// HTTPStatus is the status the API answers with (403).
func (e *ForbiddenError) HTTPStatus() int { return http.StatusForbidden }

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
