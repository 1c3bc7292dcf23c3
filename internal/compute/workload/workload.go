// Package workload is the fake driver's model of what a guest uses over
// time: CPU demand (in physical CPUs busy) and memory touched, constant,
// diurnal or bursty, a pure function of the model, a seed, the guest and
// the time — so the simulator, the tests and `keel dev` have load to
// measure, the same on every run.
//
// A model is written as one line, a kind and key=value settings:
//
//	constant cpu=1.5 mem=2048
//	diurnal cpu=10% peak=90% peak_at=14h period=24h
//	bursty cpu=0.2 peak=2 every=10m for=2m chance=0.5
//
// cpu and peak are vCPUs busy, or a percentage of the flavor's vCPUs; mem
// is MiB touched, or a percentage of the flavor's RAM (default 50 %).
// diurnal follows a cosine from cpu (its trough) to peak, highest at
// peak_at into each period; bursty runs at cpu and, in each window of
// every, with probability chance, at peak for `for` at an offset drawn
// from the seed. Set it on a flavor (extra spec keel:workload), on an
// instance (metadata keel:workload, which wins), in a scenario file, or
// as the fake driver's default ([keel] fake_workload).
package workload

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"
)

// Key is the flavor extra spec and the instance metadata key that sets a
// guest's model.
const Key = "keel:workload"

// Kind is a model's shape.
type Kind string

// The kinds.
const (
	Constant Kind = "constant"
	Diurnal  Kind = "diurnal"
	Bursty   Kind = "bursty"
)

// amount is a value in absolute units or a fraction of the flavor's.
type amount struct {
	v   float64
	pct bool // v is a fraction of the flavor's amount
	set bool
}

func (a amount) of(total float64) float64 {
	if a.pct {
		return a.v * total
	}
	return a.v
}

func (a amount) String() string {
	if a.pct {
		return strconv.FormatFloat(a.v*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(a.v, 'f', -1, 64)
}

// Model is a parsed workload line.
type Model struct {
	Kind   Kind
	cpu    amount
	peak   amount
	mem    amount
	period time.Duration // diurnal
	peakAt time.Duration // diurnal
	every  time.Duration // bursty
	length time.Duration // bursty
	chance float64       // bursty
	text   string
}

// String returns the line the model was parsed from.
func (m Model) String() string { return m.text }

// Parse reads a model line. It checks what needs no flavor (a negative
// value, an unknown key, a burst longer than its window); Check checks
// the rest against a flavor.
func Parse(line string) (Model, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return Model{}, errors.New("empty workload: want constant, diurnal or bursty, then key=value settings")
	}
	m := Model{Kind: Kind(fields[0]), text: strings.Join(fields, " "),
		mem: amount{v: 0.5, pct: true}, period: 24 * time.Hour, peakAt: 14 * time.Hour,
		every: 10 * time.Minute, length: 2 * time.Minute, chance: 0.5}
	switch m.Kind {
	case Constant, Diurnal, Bursty:
	default:
		return Model{}, fmt.Errorf("unknown workload kind %q (constant, diurnal, bursty)", fields[0])
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Model{}, fmt.Errorf("workload setting %q: want key=value", f)
		}
		var err error
		switch {
		case k == "cpu":
			m.cpu, err = parseAmount(k, v)
		case k == "mem":
			m.mem, err = parseAmount(k, v)
		case k == "peak" && m.Kind != Constant:
			m.peak, err = parseAmount(k, v)
		case k == "period" && m.Kind == Diurnal:
			m.period, err = parseDuration(k, v, false)
		case k == "peak_at" && m.Kind == Diurnal:
			m.peakAt, err = parseDuration(k, v, true)
		case k == "every" && m.Kind == Bursty:
			m.every, err = parseDuration(k, v, false)
		case k == "for" && m.Kind == Bursty:
			m.length, err = parseDuration(k, v, false)
		case k == "chance" && m.Kind == Bursty:
			m.chance, err = strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(m.chance) || m.chance < 0 || m.chance > 1 {
				err = fmt.Errorf("chance=%s: want a probability from 0 to 1", v)
			}
		default:
			return Model{}, fmt.Errorf("workload %s has no setting %q", m.Kind, k)
		}
		if err != nil {
			return Model{}, err
		}
	}
	if !m.cpu.set {
		return Model{}, fmt.Errorf("workload %s needs cpu=", m.Kind)
	}
	if m.Kind != Constant {
		if !m.peak.set {
			return Model{}, fmt.Errorf("workload %s needs peak=", m.Kind)
		}
		if m.peak.pct == m.cpu.pct && m.peak.v < m.cpu.v {
			return Model{}, fmt.Errorf("peak=%s is below cpu=%s", m.peak, m.cpu)
		}
	}
	if m.Kind == Bursty && m.length > m.every {
		return Model{}, fmt.Errorf("for=%s is longer than every=%s", m.length, m.every)
	}
	return m, nil
}

func parseAmount(k, v string) (amount, error) {
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return amount{}, fmt.Errorf("%s=%s: want a number, or a percentage such as 50%%", k, v)
	case f < 0:
		return amount{}, fmt.Errorf("%s=%s: must not be negative", k, v)
	case pct && f > 100:
		return amount{}, fmt.Errorf("%s=%s: above 100%% of the flavor's", k, v)
	}
	if pct {
		f /= 100
	}
	return amount{v: f, pct: pct, set: true}, nil
}

func parseDuration(k, v string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || (d == 0 && !zeroOK) {
		return 0, fmt.Errorf("%s=%s: want a positive duration such as 10m", k, v)
	}
	return d, nil
}

// Check refuses a model a guest of the flavor cannot have: CPU above its
// vCPUs, memory above its RAM.
func (m Model) Check(vcpus, ramMB int64) error {
	for _, a := range []struct {
		name string
		amt  amount
	}{{"cpu", m.cpu}, {"peak", m.peak}} {
		if a.amt.set && a.amt.of(float64(vcpus)) > float64(vcpus) {
			return fmt.Errorf("%s=%s is above the flavor's %d vCPUs", a.name, a.amt, vcpus)
		}
	}
	if m.mem.of(float64(ramMB)) > float64(ramMB) {
		return fmt.Errorf("mem=%s is above the flavor's %d MiB", m.mem, ramMB)
	}
	return nil
}

// Demand is what a guest of the flavor (vcpus, ramMB) under the model uses
// at t: CPU in physical CPUs busy and memory touched in MiB. seed and
// uuid make bursty guests burst at different times, the same on every
// run.
func (m Model) Demand(seed uint64, uuid string, vcpus, ramMB int64, t time.Time) (cpu float64, memMB int64) {
	base := m.cpu.of(float64(vcpus))
	memMB = int64(math.Round(m.mem.of(float64(ramMB))))
	switch m.Kind {
	case Diurnal:
		peak := m.peak.of(float64(vcpus))
		phase := float64(t.UnixNano()-int64(m.peakAt)) / float64(m.period)
		cpu = base + (peak-base)*(1+math.Cos(2*math.Pi*phase))/2
	case Bursty:
		peak := m.peak.of(float64(vcpus))
		window := t.UnixNano() / int64(m.every)
		h := hash(seed, uuid, window)
		cpu = base
		if float64(h%1_000_000)/1_000_000 < m.chance {
			slack := int64(m.every - m.length)
			var off int64
			if slack > 0 {
				off = int64((h >> 20) % uint64(slack))
			}
			at := t.UnixNano() - window*int64(m.every)
			if at >= off && at < off+int64(m.length) {
				cpu = peak
			}
		}
	default:
		cpu = base
	}
	return min(max(cpu, 0), float64(vcpus)), memMB
}

func hash(seed uint64, uuid string, window int64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
		b[8+i] = byte(uint64(window) >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(uuid))
	return h.Sum64()
}

// For returns the model of a guest: its instance metadata's keel:workload,
// else its flavor's extra spec, else def (ok false when none is set).
func For(metadata, extraSpecs map[string]string, def string) (line string, ok bool) {
	if v := metadata[Key]; v != "" {
		return v, true
	}
	if v := extraSpecs[Key]; v != "" {
		return v, true
	}
	return def, def != ""
}
