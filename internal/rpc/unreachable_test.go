package rpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"keel/internal/bus"
	"keel/internal/conductor"
	"keel/internal/rpc"
	"keel/internal/testenv"
)

// TestCallToNoAgentIsUnreachable: a call to a host whose agent is not on
// the bus fails, once its time is up, with an error the conductor tells
// apart without knowing the bus (conductor.ErrAgentUnreachable: it repeats
// the step later), still wrapping the bus's reason.
func TestCallToNoAgentIsUnreachable(t *testing.T) {
	ctx := testenv.Context(t)
	servers, conn := startBus(ctx, t)
	api, err := rpc.Agents{Conn: conn(servers)}.Compute("h-nobody")
	if err != nil {
		t.Fatal(err)
	}
	// The call's own deadline bounds it (the bus's default is 30 s).
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = api.TerminateInstance(callCtx, "11111111-2222-4333-8444-555555555555")
	if !errors.Is(err, conductor.ErrAgentUnreachable) || !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("call to no agent: %v; want ErrAgentUnreachable wrapping bus.ErrUnavailable", err)
	}
}
