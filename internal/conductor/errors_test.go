package conductor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"keel/internal/conductor"
)

// TestUnreachableMarksWithoutChangingTheText: the adapters mark a call
// that got no answer with Unreachable; the conductor tells it apart with
// errors.Is(err, ErrAgentUnreachable) through any wrapping, the text and
// the wrapped cause stay the adapter's, and other failures stay unmarked.
func TestUnreachableMarksWithoutChangingTheText(t *testing.T) {
	cause := errors.New("bus: unavailable")
	err := fmt.Errorf("stopping: %w", conductor.Unreachable(fmt.Errorf("stop_instance on h1: %w", cause)))
	if !errors.Is(err, conductor.ErrAgentUnreachable) || !errors.Is(err, cause) {
		t.Fatalf("%v: Is(ErrAgentUnreachable) %v, Is(cause) %v; want both", err, errors.Is(err, conductor.ErrAgentUnreachable), errors.Is(err, cause))
	}
	if got, want := err.Error(), "stopping: stop_instance on h1: bus: unavailable"; got != want {
		t.Fatalf("text %q, want %q", got, want)
	}
	if errors.Is(fmt.Errorf("stop_instance on h1: %w", context.Canceled), conductor.ErrAgentUnreachable) {
		t.Fatal("an unmarked error matched ErrAgentUnreachable")
	}
	if conductor.Unreachable(nil) != nil {
		t.Fatal("Unreachable(nil) is not nil")
	}
}
