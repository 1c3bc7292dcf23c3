package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Error codes carried in a reply envelope.
const (
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeInvalid     = "invalid"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	// CodeForbidden refuses a call its sender may not make: an agent's
	// report or store call about another host.
	CodeForbidden = "forbidden"
)

var (
	// ErrUnavailable is wrapped by the error of a call that got no answer
	// (no subscriber, timeout, bus disconnected) and of a cast or
	// notification the bus could not send: "the agent is down", as opposed
	// to a *RemoteError, which the agent returned. Its code is
	// CodeUnavailable.
	ErrUnavailable = WithCode(CodeUnavailable, errors.New("bus: unavailable"))

	// ErrNotDelivered is wrapped, besides ErrUnavailable, when the bus knows
	// that no handler received the message: nobody subscribes to the
	// subject, or the connection was down when it was sent. A call that
	// timed out does not wrap it: its handler may have run.
	ErrNotDelivered = errors.New("bus: not delivered")

	// ErrConnectionLost is wrapped, besides ErrUnavailable, by the error of
	// a call whose connection went down while it waited for the answer:
	// the handler may have run, and its answer is lost. Sending the call
	// again with the same request id (WithRequestID) is safe: the handler
	// does not run twice.
	ErrConnectionLost = errors.New("bus: connection lost while waiting for the answer")

	// ErrNoAnswerYet is wrapped, besides ErrUnavailable, by the error of a
	// call that waited for its attempt time (WithAttempt) without an
	// answer while its deadline is still ahead: repeat it with the same
	// request id.
	ErrNoAnswerYet = errors.New("bus: no answer within the attempt time")
)

// RemoteError is an error returned by the handler of a call.
type RemoteError struct {
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("remote %s: %s", e.Code, e.Message)
}

// RPCCode makes a forwarded RemoteError keep its code.
func (e *RemoteError) RPCCode() string { return e.Code }

type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string   { return e.err.Error() }
func (e *codedError) Unwrap() error   { return e.err }
func (e *codedError) RPCCode() string { return e.code }

// WithCode returns an error that wraps err and whose RPCCode is code; a
// handler returns it to choose the code its caller sees. WithCode(code, nil)
// is nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// ErrorCode is the code a handler's error is answered with: the RPCCode()
// of the first error in err's chain that has a non-empty one, otherwise
// CodeInternal. ErrorCode(nil) is "".
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var coder interface{ RPCCode() string }
	if errors.As(err, &coder) {
		if code := coder.RPCCode(); code != "" {
			return code
		}
	}
	return CodeInternal
}

// IsCode reports whether err (a *RemoteError from Call, or any error) has
// the given code.
func IsCode(err error, code string) bool {
	return err != nil && ErrorCode(err) == code
}

// Decode unmarshals a request body into v; a malformed body gives an error
// with CodeInvalid, so a handler can return it as is.
func Decode(data json.RawMessage, v any) error {
	if len(data) == 0 {
		return WithCode(CodeInvalid, errors.New("bus: empty message body"))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return WithCode(CodeInvalid, fmt.Errorf("bus: decode message: %w", err))
	}
	return nil
}

// unavailableError is the error of a call nobody answered, or of a message
// the bus could not send.
type unavailableError struct {
	msg       string
	delivered bool // false: certainly not delivered
	cause     error
}

func (e *unavailableError) Error() string   { return "bus: " + e.msg }
func (e *unavailableError) RPCCode() string { return CodeUnavailable }
func (e *unavailableError) Unwrap() []error {
	errs := []error{ErrUnavailable}
	if !e.delivered {
		errs = append(errs, ErrNotDelivered)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

func roundDuration(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
