package qemu

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"keel/internal/compute/qemu/guest"
	"keel/internal/compute/qemu/qmp"
)

// readWords reads n 32-bit words of guest physical memory at addr with
// the human monitor's xp command.
func readWords(ctx context.Context, c *qmp.Conn, addr uint64, n int) ([]uint32, error) {
	out, err := c.HumanMonitor(ctx, fmt.Sprintf("xp /%dwx %#x", n, addr))
	if err != nil {
		return nil, err
	}
	var words []uint32
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			w, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 32)
			if err != nil {
				return nil, fmt.Errorf("reading guest memory: unexpected %q", line)
			}
			words = append(words, uint32(w))
		}
	}
	if len(words) != n {
		return nil, fmt.Errorf("reading guest memory at %#x: got %d words, want %d (%q)", addr, len(words), n, out)
	}
	return words, nil
}

func heartbeat(ctx context.Context, c *qmp.Conn) (uint32, error) {
	w, err := readWords(ctx, c, guest.HeartbeatAddr, 2)
	if err != nil {
		return 0, err
	}
	if w[1] != guest.Magic {
		return 0, fmt.Errorf("no keel guest in this memory (magic %#x, want %#x)", w[1], guest.Magic)
	}
	return w[0], nil
}
