package sim

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
)

// DefaultMemoryLimit is the soft heap limit TuneGC sets (900 MiB). The
// 10,000-host day keeps about 310 MB live (the world: instance records
// and allocations in the memory store, trackers, guests), more in its
// final check. Measured on that day (policy claim, 2 shared cores, load
// 3–4) once the memory store kept instances and allocations compactly:
// 900 MiB 24.5 s CPU and 917 MiB peak RSS (18 collections); no limit
// 22.6 s and 1.63 GiB. Before that (~450 MB live): 900 MiB 41–44 s (29
// collections, about 20 s of the CPU), 960 MiB 44 s and 976 MiB, no limit
// 27 s and 2.25 GiB. 900 MiB keeps the day under 1 GiB; GOMEMLIMIT
// overrides it.
const DefaultMemoryLimit = 900 << 20

// memoryPerHost is the soft limit's share per host past 12,127 hosts
// (where 76 KiB a host passes DefaultMemoryLimit): 7.25 GiB at 100,000.
// The 100,000-host day (1.5 million instances at the start) keeps 3.5–5
// GB live; under the fixed 900 MiB the collector would run without pause,
// and each collection marks all of it (tens of seconds of CPU), so the
// limit is what the day's collections cost: 76 KiB a host gives each
// collection about 1.5 times the room 64 KiB did. The day now runs in 272
// s of CPU and 7.3 GiB peak RSS with no GOMEMLIMIT (load 6–13), within
// issue 29's 8 GiB.
const memoryPerHost = 76 << 10

// MemoryLimit is the soft heap limit TuneGC sets for a scenario of hosts
// hosts: DefaultMemoryLimit, or 76 KiB a host when that is more.
func MemoryLimit(hosts int) int64 {
	return max(DefaultMemoryLimit, int64(hosts)*memoryPerHost)
}

// TuneGC sets the collector for a long run and returns a function that
// puts the previous settings back. The simulator allocates many
// short-lived records: a high GOGC (400) trades memory for fewer
// collections, and a soft memory limit caps what that trade may cost. A
// GOMEMLIMIT or GOGC in the environment wins. The settings are the
// process's: runs at once (tests in parallel) share one tuning, set by
// the first (its MemoryLimit(hosts)) and put back by the last.
func TuneGC(hosts int) (restore func()) {
	gcTuning.Lock()
	defer gcTuning.Unlock()
	if gcTuning.runs == 0 {
		oldPercent, oldLimit := -2, int64(-2)
		if os.Getenv("GOGC") == "" {
			oldPercent = debug.SetGCPercent(400)
		}
		if os.Getenv("GOMEMLIMIT") == "" {
			oldLimit = debug.SetMemoryLimit(MemoryLimit(hosts))
		}
		gcTuning.restore = func() {
			if oldPercent != -2 {
				debug.SetGCPercent(oldPercent)
			}
			if oldLimit != -2 {
				debug.SetMemoryLimit(oldLimit)
			}
		}
	}
	gcTuning.runs++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcTuning.Lock()
			defer gcTuning.Unlock()
			if gcTuning.runs--; gcTuning.runs == 0 {
				gcTuning.restore()
			}
		})
	}
}

// gcTuning counts the runs TuneGC tuned for and holds how to undo it.
var gcTuning struct {
	sync.Mutex
	runs    int
	restore func()
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
