package sim

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
)

// DefaultMemoryLimit is the soft heap limit TuneGC sets (900 MiB): the
// 10,000-host day keeps about 350 MiB live, so collections are rare until
// the heap nears it, and the process stays under 1 GiB resident.
const DefaultMemoryLimit = 900 << 20

// TuneGC sets the collector for a long run and returns a function that
// puts the previous settings back. The simulator allocates many
// short-lived records: a high GOGC (400) trades memory for fewer
// collections, and a soft memory limit caps what that trade may cost. A
// GOMEMLIMIT or GOGC in the environment wins.
func TuneGC() (restore func()) {
	oldPercent, oldLimit := -2, int64(-2)
	if os.Getenv("GOGC") == "" {
		oldPercent = debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		oldLimit = debug.SetMemoryLimit(DefaultMemoryLimit)
	}
	return func() {
		if oldPercent != -2 {
			debug.SetGCPercent(oldPercent)
		}
		if oldLimit != -2 {
			debug.SetMemoryLimit(oldLimit)
		}
	}
}

// ResetPeakRSS starts a new peak-RSS measurement (Linux: writing 5 to
// /proc/self/clear_refs resets VmHWM); false where it cannot.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// PeakRSS is the process's peak resident set since the last ResetPeakRSS
// (VmHWM), in bytes; 0 where /proc has none.
func PeakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
			f := bytes.Fields(rest) // "123456 kB"
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(string(f[0]), 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
