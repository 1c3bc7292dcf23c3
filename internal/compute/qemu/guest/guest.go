// Package guest is keel's tiny test guest for the QEMU driver: a 512-byte
// x86 boot sector built by the project itself (guest.S, assembled into
// guest.bin and embedded), so no image is ever downloaded. A mode byte
// chosen per instance (server metadata keel_guest) makes it idle, fill N
// MiB once and idle, or dirty N MiB forever; the heartbeat word at
// HeartbeatAddr proves a guest kept running across a live migration.
package guest

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

//go:embed guest.bin
var sector []byte

// Mode is what the guest does once booted.
type Mode byte

// Modes (the byte guest.S reads).
const (
	Idle  Mode = 'i' // halts between timer ticks, counting them
	Fill  Mode = 'f' // makes N MiB non-zero once, then idles
	Dirty Mode = 'd' // rewrites N MiB forever on a busy vCPU
)

// Guest memory layout.
const (
	// HeartbeatAddr is the physical address of the 32-bit heartbeat: it
	// rises with every timer tick (idle, fill) or every pass over the
	// dirtied memory (dirty).
	HeartbeatAddr = 0x1000
	// MagicAddr holds Magic once the guest runs.
	MagicAddr = 0x1004
	// Magic is "KEEL" read as a little-endian word.
	Magic = 0x4c45454b
	// TouchedBase is where the memory the guest fills or dirties starts
	// (1 MiB).
	TouchedBase = 0x100000

	modeOffset = 0x1fa
	mibOffset  = 0x1fc
)

// Spec is one guest's program: a mode and how many MiB it touches.
type Spec struct {
	Mode Mode
	MiB  int
}

// MetadataKey is the server metadata key that selects a guest's program
// (`openstack server create --property keel_guest=dirty-16`).
const MetadataKey = "keel_guest"

// String is the metadata value that selects the spec (see Parse).
func (s Spec) String() string {
	switch s.Mode {
	case Fill:
		return fmt.Sprintf("fill-%d", s.MiB)
	case Dirty:
		return fmt.Sprintf("dirty-%d", s.MiB)
	}
	return "idle"
}

// Parse reads a spec from a server's keel_guest metadata: fill-N and
// dirty-N select those modes over N MiB; idle or nothing an idle guest.
func Parse(v string) (Spec, error) {
	if v == "" || v == "idle" {
		return Spec{Mode: Idle}, nil
	}
	for _, m := range []struct {
		prefix string
		mode   Mode
	}{{"fill-", Fill}, {"dirty-", Dirty}} {
		rest, ok := strings.CutPrefix(v, m.prefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 || n > 0xffff {
			break
		}
		return Spec{Mode: m.mode, MiB: n}, nil
	}
	return Spec{}, fmt.Errorf("%s %q: want idle, fill-N or dirty-N, with N the MiB to touch (1 to 65535)", MetadataKey, v)
}

// MinRAMMB is the least guest RAM the spec runs in: the first MiB, the
// touched MiB, and one to spare.
func (s Spec) MinRAMMB() int64 {
	if s.Mode == Idle {
		return 2
	}
	return int64(s.MiB) + 2
}

// Image returns the boot sector for the spec: a 512-byte raw disk image.
func (s Spec) Image() []byte {
	b := append([]byte(nil), sector...)
	b[modeOffset] = byte(s.Mode)
	binary.LittleEndian.PutUint16(b[mibOffset:], uint16(s.MiB))
	return b
}

// HeartbeatCommand is the human-monitor command (HMP, which QMP's
// human-monitor-command and libvirt's qemu-monitor-command --hmp both
// carry) that reads the heartbeat and the magic word: two 32-bit words of
// guest physical memory at HeartbeatAddr.
var HeartbeatCommand = fmt.Sprintf("xp /2wx %#x", HeartbeatAddr)

// ParseHeartbeat reads HeartbeatCommand's output: the heartbeat, once the
// magic word proves the memory is a keel guest's.
func ParseHeartbeat(out string) (uint32, error) {
	var words []uint32
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			w, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 32)
			if err != nil {
				return 0, fmt.Errorf("reading guest memory: unexpected %q", line)
			}
			words = append(words, uint32(w))
		}
	}
	if len(words) != 2 {
		return 0, fmt.Errorf("reading guest memory at %#x: got %d words, want 2 (%q)", HeartbeatAddr, len(words), out)
	}
	if words[1] != Magic {
		return 0, fmt.Errorf("no keel guest in this memory (magic %#x, want %#x)", words[1], Magic)
	}
	return words[0], nil
}
