package rpc

import (
	"context"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// lifecycleOps are the agent methods of the lifecycle actions: each is
// the operation's name (Nova's compute RPC names, stop_instance, …).
var lifecycleOps = []string{
	lifecycle.OpStop, lifecycle.OpStart, lifecycle.OpReboot, lifecycle.OpRebootHard,
	lifecycle.OpPause, lifecycle.OpUnpause, lifecycle.OpSuspend, lifecycle.OpResume,
	lifecycle.OpRescue, lifecycle.OpUnrescue, lifecycle.OpRebuild, lifecycle.OpShelve, lifecycle.OpShelveUnplug,
	lifecycle.OpSnapshot,
}

var _ conductor.LifecycleAPI = (*Agent)(nil)

// InstanceLifecycle implements conductor.LifecycleAPI: the agent runs op
// on inst's guest and answers when it is done.
func (a *Agent) InstanceLifecycle(ctx context.Context, inst records.Instance, op string) error {
	return a.call(ctx, op, computeArgs{Instance: inst}, nil)
}

// lifecycleHandlers answer the lifecycle methods for m.
func lifecycleHandlers(m *compute.Manager, into map[string]func(ctx context.Context, a computeArgs) (any, error)) {
	for _, op := range lifecycleOps {
		into[op] = func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.InstanceLifecycle(ctx, a.Instance, op)
		}
	}
}
