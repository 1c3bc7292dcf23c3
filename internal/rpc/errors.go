package rpc

import (
	"errors"
	"fmt"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/store"
)

// Codes beyond the bus's own.
const (
	codeCapacity     = "capacity"
	codeInvalidState = "invalid_state"
	codeNoConsole    = "no_console"
)

// encode gives a handler's error the code that lets the caller rebuild its
// type.
func encode(err error) error {
	if err == nil {
		return nil
	}
	var ise *conductor.InvalidStateError
	switch {
	case bus.ErrorCode(err) != bus.CodeInternal:
		return err // already coded (e.g. a forwarded remote error)
	case errors.Is(err, store.ErrNotFound):
		return bus.WithCode(bus.CodeNotFound, err)
	case placement.IsConflict(err), errors.Is(err, store.ErrExists):
		return bus.WithCode(bus.CodeConflict, err)
	case placement.IsCapacity(err):
		return bus.WithCode(codeCapacity, err)
	case placement.IsInvalid(err):
		return bus.WithCode(bus.CodeInvalid, err)
	case errors.As(err, &ise):
		return bus.WithCode(codeInvalidState, err)
	case errors.Is(err, compute.ErrNoConsole):
		return bus.WithCode(codeNoConsole, err)
	}
	return err
}

// decode turns a remote error back into the typed error its code names,
// keeping the remote message as the error's text.
func decode(err error) error {
	var re *bus.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	switch re.Code {
	case bus.CodeNotFound:
		return fmt.Errorf("%s: %w", re.Message, store.ErrNotFound)
	case bus.CodeForbidden:
		return fmt.Errorf("%w: %w", re, store.ErrForbidden)
	case bus.CodeConflict, codeCapacity:
		return &remoteError{code: re.Code, msg: re.Message}
	case bus.CodeInvalid:
		return &placement.InvalidError{Msg: re.Message}
	case codeInvalidState:
		return &conductor.InvalidStateError{Msg: re.Message}
	case codeNoConsole:
		return fmt.Errorf("%s: %w", re.Message, compute.ErrNoConsole)
	}
	return err
}

// remoteError is a conflict or capacity refusal from the other side: its
// text is the remote message, and errors.As finds the placement type the
// code names (so placement.IsConflict / IsCapacity hold).
type remoteError struct{ code, msg string }

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) As(target any) bool {
	switch t := target.(type) {
	case **placement.ConflictError:
		if e.code == bus.CodeConflict {
			*t = &placement.ConflictError{Kind: "remote", UUID: e.msg}
			return true
		}
	case **placement.CapacityError:
		if e.code == codeCapacity {
			*t = &placement.CapacityError{Reason: e.msg}
			return true
		}
	}
	return false
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
