package qemu

import (
	"context"

	"keel/internal/compute/qemu/guest"
	"keel/internal/compute/qemu/qmp"
)

// heartbeat reads the guest's heartbeat from its memory through the
// human monitor (guest.HeartbeatCommand).
func heartbeat(ctx context.Context, c *qmp.Conn) (uint32, error) {
	out, err := c.HumanMonitor(ctx, guest.HeartbeatCommand)
	if err != nil {
		return 0, err
	}
	return guest.ParseHeartbeat(out)
}
