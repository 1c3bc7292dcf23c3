package rpc

import (
	"context"

	"keel/internal/compute"
	"keel/internal/records"
)

// A cold migration's and resize's agent methods, Nova's names.
const (
	mPrepResize         = "prep_resize"
	mResizeInstance     = "resize_instance"
	mFinishResize       = "finish_resize"
	mConfirmResize      = "confirm_resize"
	mRevertResize       = "revert_resize"
	mFinishRevertResize = "finish_revert_resize"
)

// PrepResize implements conductor.ComputeAPI.
func (a *Agent) PrepResize(ctx context.Context, inst records.Instance, source string) (map[string]string, error) {
	var data map[string]string
	err := a.call(ctx, mPrepResize, computeArgs{Instance: inst, Host: source}, &data)
	return data, err
}

// ResizeInstance implements conductor.ComputeAPI: the agent accepts the
// disk move and reports its end through the conductor's copy subjects.
func (a *Agent) ResizeInstance(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	return a.call(ctx, mResizeInstance, computeArgs{MigrationID: migID, Version: version, Instance: inst, Host: dest, Data: data}, nil)
}

// FinishResize implements conductor.ComputeAPI.
func (a *Agent) FinishResize(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mFinishResize, computeArgs{Instance: inst}, nil)
}

// ConfirmResize implements conductor.ComputeAPI.
func (a *Agent) ConfirmResize(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mConfirmResize, computeArgs{Instance: inst}, nil)
}

// RevertResize implements conductor.ComputeAPI.
func (a *Agent) RevertResize(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mRevertResize, computeArgs{Instance: inst}, nil)
}

// FinishRevertResize implements conductor.ComputeAPI.
func (a *Agent) FinishRevertResize(ctx context.Context, inst records.Instance) error {
	return a.call(ctx, mFinishRevertResize, computeArgs{Instance: inst}, nil)
}

// resizeHandlers are the agent's answers to a cold migration's steps.
func resizeHandlers(m *compute.Manager) map[string]func(ctx context.Context, a computeArgs) (any, error) {
	return map[string]func(ctx context.Context, a computeArgs) (any, error){
		mPrepResize: func(ctx context.Context, a computeArgs) (any, error) {
			return m.PrepResize(ctx, a.Instance, a.Host)
		},
		mResizeInstance: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.ResizeInstance(ctx, a.MigrationID, a.Version, a.Instance, a.Host, a.Data)
		},
		mFinishResize:  func(ctx context.Context, a computeArgs) (any, error) { return nil, m.FinishResize(ctx, a.Instance) },
		mConfirmResize: func(ctx context.Context, a computeArgs) (any, error) { return nil, m.ConfirmResize(ctx, a.Instance) },
		mRevertResize:  func(ctx context.Context, a computeArgs) (any, error) { return nil, m.RevertResize(ctx, a.Instance) },
		mFinishRevertResize: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.FinishRevertResize(ctx, a.Instance)
		},
		mRebuildInstance: func(ctx context.Context, a computeArgs) (any, error) {
			return nil, m.RebuildInstance(ctx, a.MigrationID, a.Instance)
		},
	}
}

// mRebuildInstance is Nova's rebuild_instance with recreate (an
// evacuation); the lifecycle's rebuild on the same host has the plain name.
const mRebuildInstance = "rebuild_evacuated_instance"

// RebuildInstance implements conductor.ComputeAPI: the destination
// accepts an evacuated instance's rebuild and reports its end through the
// conductor's copy subjects.
func (a *Agent) RebuildInstance(ctx context.Context, migID int64, inst records.Instance) error {
	return a.call(ctx, mRebuildInstance, computeArgs{MigrationID: migID, Instance: inst}, nil)
}
