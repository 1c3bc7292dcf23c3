package rpc

import (
	"context"
	"fmt"

	"keel/internal/compute"
	"keel/internal/conductor"
)

// mListGuests is keel's own agent method: the driver's guests, as the
// hypervisor sees them (the server's audit compares them with the
// records).
const mListGuests = "list_guests"

// guestMethods adds the methods of this file to an agent's handlers.
func guestMethods(handlers map[string]func(ctx context.Context, a computeArgs) (any, error), m *compute.Manager) {
	handlers[mListGuests] = func(ctx context.Context, _ computeArgs) (any, error) {
		gs, err := m.Driver().Guests(ctx)
		if gs == nil {
			gs = []compute.Guest{}
		}
		return gs, err
	}
	handlers[mConsoleOutput] = func(ctx context.Context, a computeArgs) (any, error) {
		return m.ConsoleOutput(ctx, a.UUID)
	}
	handlers[mReadSnapshot] = func(ctx context.Context, a computeArgs) (any, error) {
		if a.Offset < 0 || a.Length <= 0 {
			return nil, fmt.Errorf("read_snapshot: offset %d, length %d", a.Offset, a.Length)
		}
		buf := make([]byte, min(a.Length, ImageChunkMax))
		info, n, err := m.ReadSnapshot(ctx, a.UUID, a.ImageID, a.Offset, buf)
		if err != nil {
			return nil, err
		}
		return snapshotChunk{Info: info, Data: buf[:n]}, nil
	}
}

// mReadSnapshot is keel's own agent method: a chunk of the disk the host
// captured for a snapshot (snapshot_instance), which the conductor
// stores as the image's data.
const mReadSnapshot = "read_snapshot"

type snapshotChunk struct {
	Info compute.SnapshotInfo `json:"info"`
	Data []byte               `json:"data"`
}

var _ conductor.SnapshotAPI = (*Agent)(nil)

// ReadSnapshot implements conductor.SnapshotAPI: up to length bytes (at
// most ImageChunkMax) of the capture at offset; none at its end.
func (a *Agent) ReadSnapshot(ctx context.Context, uuid, imageID string, offset int64, length int) (compute.SnapshotInfo, []byte, error) {
	var c snapshotChunk
	err := a.call(ctx, mReadSnapshot, computeArgs{UUID: uuid, ImageID: imageID, Offset: offset, Length: length}, &c)
	return c.Info, c.Data, err
}

// ListGuests returns the guests of host's driver (audit.GuestLister).
func (a Agents) ListGuests(ctx context.Context, host string) ([]compute.Guest, error) {
	ag, err := a.agent(host)
	if err != nil {
		return nil, err
	}
	return ag.ListGuests(ctx)
}

// ListGuests returns the guests of the agent's driver.
func (a *Agent) ListGuests(ctx context.Context) ([]compute.Guest, error) {
	var gs []compute.Guest
	err := a.call(ctx, mListGuests, computeArgs{}, &gs)
	return gs, err
}

// mConsoleOutput is Nova's get_console_output: the end of a guest's
// serial console log.
const mConsoleOutput = "get_console_output"

var _ conductor.ConsoleAPI = (*Agent)(nil)

// ConsoleOutput implements conductor.ConsoleAPI.
func (a *Agent) ConsoleOutput(ctx context.Context, uuid string) ([]byte, error) {
	var out []byte
	err := a.call(ctx, mConsoleOutput, computeArgs{UUID: uuid}, &out)
	return out, err
}
