package qemu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
)

// Measured usage: the QEMU driver reads what the Linux kernel counts — the
// host's CPU times (/proc/stat), its frequency (/proc/cpuinfo), its
// memory (/proc/meminfo's MemTotal and MemAvailable), and each
// guest's QEMU process's CPU time and resident memory (/proc/PID/stat) —
// and turns the CPU times into utilisations between two readings.

// metricSource is the Source of the metrics the QEMU driver measures.
const metricSource = "qemu.Driver"

// clockTicks is the unit of /proc's CPU times (USER_HZ: 100 on every
// Linux architecture keel runs on).
const clockTicks = 100

// MeasureWindow is the shortest time a utilisation is measured over: the
// first Measure (or one right after another) reads the counters, waits
// out the rest of the window and reads them again. /proc counts CPU time
// in 10 ms ticks, so a shorter window would be mostly rounding.
const MeasureWindow = 250 * time.Millisecond

// procSample is one reading of a guest's QEMU process.
type procSample struct {
	pid int
	// cpu is the process's user + system time, in clock ticks, and
	// start when it started, in ticks since boot.
	cpu, start uint64
	rssMB      int64
}

// sample is one reading of the host and its guests' QEMU processes.
type sample struct {
	at     time.Time
	host   compute.CPUTimes
	hostOK bool
	// uptime is the host's, in ticks (for a guest first seen).
	uptime uint64
	guests map[string]procSample
}

// measured is a guest counted by Measure: those whose QEMU runs them
// (running, paused, or the source of a copy).
func measured(s compute.GuestState) bool {
	return s == compute.GuestRunning || s == compute.GuestPaused || s == compute.GuestMigrating
}

// readSample reads the counters now.
func (d *Driver) readSample() sample {
	s := sample{at: time.Now(), guests: map[string]procSample{}}
	s.host, s.hostOK = readHostCPU()
	s.uptime = readUptime()
	d.mu.Lock()
	type one struct {
		uuid string
		pid  int
	}
	var live []one
	for uuid, v := range d.vms {
		if v.pid != 0 && measured(v.st.Guest.State) {
			live = append(live, one{uuid, v.pid})
		}
	}
	d.mu.Unlock()
	for _, g := range live {
		if p, ok := readProc(g.pid); ok {
			s.guests[g.uuid] = p
		}
	}
	return s
}

// Measure implements compute.Measurer: the host's CPU shares and each
// running guest's CPU (physical CPUs busy: its QEMU's CPU time over the
// time between two readings; over its life so far for a guest first seen)
// and resident memory, and the host's memory (left out when /proc/meminfo
// does not read: unavailable). A host whose /proc/stat does not read is
// unmeasured.
func (d *Driver) Measure(ctx context.Context) (compute.Measurement, error) {
	d.measureMu.Lock()
	defer d.measureMu.Unlock()
	prev := d.lastSample
	if prev.at.IsZero() {
		prev = d.readSample()
	}
	if wait := MeasureWindow - time.Since(prev.at); wait > 0 {
		select {
		case <-ctx.Done():
			return compute.Measurement{}, fmt.Errorf("measuring usage: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
	cur := d.readSample()
	d.lastSample = cur
	if !prev.hostOK || !cur.hostOK {
		return compute.Measurement{}, fmt.Errorf("reading /proc/stat: %w", compute.ErrUnmeasured)
	}
	host, ok := compute.CPUMetricsBetween(cur.at, metricSource, cpuMHz(), prev.host, cur.host)
	if !ok {
		return compute.Measurement{}, fmt.Errorf("/proc/stat counted no CPU time in %s: %w", cur.at.Sub(prev.at), compute.ErrUnmeasured)
	}
	totalMB, availMB := readHostMemory()
	host = append(host, compute.MemoryMetrics(cur.at, metricSource, totalMB, availMB)...)
	m := compute.Measurement{At: cur.at, Host: host}
	elapsed := cur.at.Sub(prev.at).Seconds()
	for uuid, g := range cur.guests {
		var busy float64
		if p, ok := prev.guests[uuid]; ok && p.pid == g.pid && g.cpu >= p.cpu {
			busy = float64(g.cpu-p.cpu) / clockTicks / elapsed
		} else if cur.uptime > g.start {
			busy = float64(g.cpu) / float64(cur.uptime-g.start)
		}
		m.Instances = append(m.Instances, records.InstanceUsage{UUID: uuid, VCPUsBusy: busy, MemoryMB: g.rssMB, Timestamp: cur.at})
	}
	slices.SortFunc(m.Instances, func(a, b records.InstanceUsage) int { return strings.Compare(a.UUID, b.UUID) })
	return m, nil
}

// readHostCPU reads the host's cumulative CPU times (the "cpu" line of
// /proc/stat: user nice system idle iowait irq softirq ...), as libvirt's
// virNodeGetCPUStats adds them up.
func readHostCPU() (compute.CPUTimes, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return compute.CPUTimes{}, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return compute.CPUTimes{}, false
	}
	return parseHostCPU(line)
}

// parseHostCPU parses /proc/stat's "cpu" line.
func parseHostCPU(line string) (compute.CPUTimes, bool) {
	fs := strings.Fields(line)
	if len(fs) < 8 || fs[0] != "cpu" {
		return compute.CPUTimes{}, false
	}
	var n [7]uint64
	for i := range n {
		v, err := strconv.ParseUint(fs[i+1], 10, 64)
		if err != nil {
			return compute.CPUTimes{}, false
		}
		n[i] = v
	}
	return compute.CPUTimes{User: n[0] + n[1], Kernel: n[2] + n[5] + n[6], Idle: n[3], IOWait: n[4]}, true
}

// readHostMemory reads the host's memory from /proc/meminfo: MemTotal and
// MemAvailable (the kernel's estimate of what can be given to new work
// without swapping: free memory plus the page cache and slabs it can
// reclaim), in MiB; 0, 0 when it does not read.
func readHostMemory() (totalMB, availableMB int64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	return parseMeminfo(b)
}

// parseMeminfo parses /proc/meminfo ("MemTotal:  16384000 kB" lines); a
// total without MemAvailable (kernels before 3.14) reads as unavailable.
func parseMeminfo(b []byte) (totalMB, availableMB int64) {
	var total, avail int64 = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "MemTotal" && k != "MemAvailable") {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if k == "MemTotal" {
			total = n
		} else {
			avail = n
		}
	}
	if total <= 0 || avail < 0 {
		return 0, 0
	}
	return total >> 10, avail >> 10
}

// readUptime is the host's uptime in clock ticks (0 if unreadable).
func readUptime() uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	fs := strings.Fields(string(b))
	if len(fs) == 0 {
		return 0
	}
	secs, err := strconv.ParseFloat(fs[0], 64)
	if err != nil {
		return 0
	}
	return uint64(secs * clockTicks)
}

// readProc reads a process's CPU time, start and resident memory from
// /proc/PID/stat.
func readProc(pid int) (procSample, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, false
	}
	return parseProcStat(pid, b)
}

// parseProcStat parses /proc/PID/stat: after the command in parentheses,
// field 3 is the state, 14 and 15 utime and stime, 22 starttime, 24 rss
// (pages).
func parseProcStat(pid int, b []byte) (procSample, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procSample{}, false
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 22 || fs[0] == "Z" || fs[0] == "X" {
		return procSample{}, false
	}
	num := func(k int) uint64 { v, _ := strconv.ParseUint(fs[k], 10, 64); return v }
	utime, stime, start, rss := num(11), num(12), num(19), num(21)
	return procSample{pid: pid, cpu: utime + stime, start: start, rssMB: int64(rss) * int64(os.Getpagesize()) >> 20}, true
}

// cpuMHz is the host's CPU frequency as /proc/cpuinfo gives it (its first
// "cpu MHz"), 0 when it does not.
func cpuMHz() float64 {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return 0
}
