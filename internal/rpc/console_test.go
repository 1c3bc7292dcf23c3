package rpc

import (
	"errors"
	"fmt"
	"testing"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/store"
)

// TestConsoleErrorsCrossTheBus: the two console refusals keep their type
// from the agent to the API — a driver without console logs (the API's
// 501) and a guest the host does not have (404).
func TestConsoleErrorsCrossTheBus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("console output of x on h1: %w", compute.ErrNoConsole), compute.ErrNoConsole},
		{compute.NoGuest("x"), store.ErrNotFound},
	} {
		coded := encode(c.err)
		remote := &bus.RemoteError{Code: bus.ErrorCode(coded), Message: coded.Error()}
		if got := decode(remote); !errors.Is(got, c.want) {
			t.Errorf("%v came back as %v (code %s), want one wrapping %v", c.err, got, remote.Code, c.want)
		}
	}
}
