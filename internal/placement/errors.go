package placement

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by errors about a provider or consumer that does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by errors about creating something that already exists.
var ErrExists = errors.New("already exists")

// ErrInUse is wrapped by errors refusing to delete a trait or a resource
// class that providers still use (HTTP 409).
var ErrInUse = errors.New("in use")

// ErrHasChildren is wrapped by errors refusing to delete a provider that
// is the parent of others (HTTP 409).
var ErrHasChildren = errors.New("provider has child providers")

// ConflictKind tells which generation was stale.
type ConflictKind string

// The kinds of generation conflict.
const (
	ProviderGeneration ConflictKind = "provider"
	ConsumerGeneration ConflictKind = "consumer"
	// InstanceVersion and MigrationVersion are stale record versions in
	// the compute records (optimistic updates between servers).
	InstanceVersion  ConflictKind = "instance"
	MigrationVersion ConflictKind = "migration"
	// PlanVersion is a stale move plan's version.
	PlanVersion ConflictKind = "plan"
)

// ConflictError is a write that named a stale generation (HTTP 409). The
// caller re-reads and retries, or moves on to another provider.
type ConflictError struct {
	Kind     ConflictKind
	UUID     string // provider or consumer
	Expected *int64 // what the writer named; nil means "must not exist yet"
	Actual   *int64 // what the store holds; nil means "does not exist"
}

func (e *ConflictError) Error() string {
	show := func(p *int64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("%s %s generation conflict: expected %s, store has %s", e.Kind, e.UUID, show(e.Expected), show(e.Actual))
}

// IsConflict reports whether err is (or wraps) a generation conflict.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}

// CapacityError is an allocation that does not fit a provider's inventory.
type CapacityError struct {
	Provider  string
	Class     ResourceClass
	Requested int64
	Used      int64
	Capacity  int64
	Reason    string
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("provider %s: %d %s does not fit (used %d of capacity %d): %s",
		e.Provider, e.Requested, e.Class, e.Used, e.Capacity, e.Reason)
}

// IsCapacity reports whether err is (or wraps) a capacity error.
func IsCapacity(err error) bool {
	var c *CapacityError
	return errors.As(err, &c)
}

// InvalidError is a malformed input (HTTP 400). An amount outside an
// inventory's min_unit, max_unit or step_size also names the provider
// and the class.
type InvalidError struct {
	Msg      string
	Provider string
	Class    ResourceClass
}

func (e *InvalidError) Error() string { return e.Msg }

func invalidf(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err is (or wraps) an InvalidError.
func IsInvalid(err error) bool {
	var c *InvalidError
	return errors.As(err, &c)
}
