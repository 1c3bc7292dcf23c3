package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// Sections are the harness's parts, in the order they run; --only takes a
// comma-separated subset of these names.
var Sections = []string{"decision", "claims", "api", "placement", "nova", "sim", "fleet", "metrics"}

// RequiredKeys are the figures a full or quick run of every section always
// reports (the list); the harness's own test checks each is a
// positive number.
var RequiredKeys = []string{
	"decision_p99_ms_10k", "claims_per_s_sqlite_10k", "claims_per_s_postgres_10k",
	"api_boots_per_s", "placement_candidates_ratio", "placement_claims_ratio",
	"placement_schedule_ratio", "placement_tree_candidates_ratio", "nova_scheduler_ratio", "sim_10k_24h_wall_s", "sim_10k_24h_cpu_s",
	"sim_10k_24h_peak_rss_mib",
}

// Options choose what a run does.
type Options struct {
	// Only lists the sections to run (names from Sections); empty means
	// all.
	Only []string
	// Quick shrinks every size so the whole harness runs in seconds: for
	// checking that it works, not for figures. Keys keep their names
	// (…_10k); the conditions say the sizes actually used.
	Quick bool
	// Progress receives a line as each step starts and ends (nil: none).
	Progress io.Writer
	// FleetSteps and FleetPeriod, if set, replace the fleet section's
	// ramp (host counts) and the time each step is measured.
	FleetSteps  []int
	FleetPeriod time.Duration
	// FleetNoStop measures every step of the ramp, also past one that
	// fell behind (which then holds no more than it would have).
	FleetNoStop bool
	// FleetStore is "sqlite" (default: one server, its embedded NATS) or
	// "postgres" (a throw-away PostgreSQL cluster and a nats-server, as
	// the tests start them); FleetReplicas how many servers share it.
	FleetStore    string
	FleetReplicas int
	// FleetRestart restarts the server after the ramp, with the fleet
	// connected, and measures how the agents come back.
	FleetRestart bool
	// ServerProfile, if set, is where the fleet section writes a CPU
	// profile of the keel server process over its last step.
	ServerProfile string
}

// Row is one line of the table: a figure with the conditions it was
// measured under.
type Row struct {
	Section    string `json:"section"`
	What       string `json:"what"`
	Result     string `json:"result"`
	Conditions string `json:"conditions"`
}

// Report is what a run measured.
type Report struct {
	// Figures are the numbers, by JSON key.
	Figures map[string]float64
	// Unmeasured are the figures a section names but did not reach, by
	// JSON key, with the reason: printed as null, the reason under
	// "unmeasured".
	Unmeasured map[string]string
	// Rows are the table.
	Rows []Row
	// Quick tells whether the sizes were shrunk.
	Quick bool
	// Started and Wall frame the run.
	Started time.Time
	Wall    time.Duration
	// Sections say how long each section took, the CPU time this process
	// and its children used meanwhile, and the machine's load average when
	// it started: other work on the machine shows there.
	Sections []SectionStat
	// Goals are the goals, judged (not in quick mode).
	Goals []Goal
	// Fleet are the fleet section's steps; FleetRestart the restart
	// after them (--fleet-restart).
	Fleet        []FleetStep
	FleetRestart *FleetRestart
	// Metrics is the metrics section's measurement (nil when not run).
	Metrics *MetricsCost
}

// Goal is one of the goals and whether this run met it.
type Goal struct {
	Key  string `json:"key"`
	Goal string `json:"goal"`
	Met  bool   `json:"met"`
}

// SectionStat is one section's cost and the machine's load.
type SectionStat struct {
	Name   string  `json:"name"`
	WallS  float64 `json:"wall_s"`
	CPUS   float64 `json:"cpu_s"`
	Load1  float64 `json:"load1_at_start"`
	Shared bool    `json:"shared,omitempty"` // ran alongside the others (quick mode): its CPU figure includes theirs
}

// run carries one harness run's state.
type run struct {
	opts Options
	rep  *Report
}

func (r *run) progress(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "keelbench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

func (r *run) figure(key string, v float64) { r.rep.Figures[key] = v }

// unmeasured notes a figure the run did not reach, and why.
func (r *run) unmeasured(key, why string) {
	if r.rep.Unmeasured == nil {
		r.rep.Unmeasured = map[string]string{}
	}
	r.rep.Unmeasured[key] = why
}

func (r *run) row(section, what, result, conditions string) {
	r.rep.Rows = append(r.rep.Rows, Row{Section: section, What: what, Result: result, Conditions: conditions})
}

// size picks the full or the quick value.
func (r *run) size(full, quick int) int {
	if r.opts.Quick {
		return quick
	}
	return full
}

// Run runs the selected sections one after the other and returns what they
// measured. Every server, cluster and child process a section starts is
// stopped before the section returns, also on error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	for _, s := range opts.Only {
		if !contains(Sections, s) {
			return nil, fmt.Errorf("unknown section %q (sections: %s)", s, strings.Join(Sections, ", "))
		}
	}
	rep := &Report{Figures: map[string]float64{}, Quick: opts.Quick, Started: time.Now()}
	if opts.Progress != nil {
		opts.Progress = &lockedWriter{w: opts.Progress}
	}
	var selected []string
	for _, s := range Sections {
		if len(opts.Only) == 0 || contains(opts.Only, s) {
			selected = append(selected, s)
		}
	}
	// Each section reports into its own run; the rows are merged in
	// section order. A full run takes the sections one at a time, so no
	// figure is measured while another section loads the machine; quick
	// mode, whose figures mean nothing, runs them all at once.
	parts := make([]*run, len(selected))
	errs := make([]error, len(selected))
	var wg sync.WaitGroup
	for i, s := range selected {
		parts[i] = &run{opts: opts, rep: &Report{Figures: map[string]float64{}}}
		one := func() {
			r := parts[i]
			t0, c0, load := time.Now(), cpuTime(), loadAverage()
			r.progress("%s: starting (load average %.2f)", s, load)
			if err := r.section(ctx, s); err != nil {
				errs[i] = fmt.Errorf("%s: %w", s, err)
				return
			}
			st := SectionStat{Name: s, WallS: time.Since(t0).Seconds(), CPUS: (cpuTime() - c0).Seconds(), Load1: load, Shared: opts.Quick}
			r.rep.Sections = append(r.rep.Sections, st)
			r.progress("%s: done in %.1f s wall, %.1f s CPU", s, st.WallS, st.CPUS)
		}
		if !opts.Quick {
			one()
			if errs[i] != nil {
				break
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			one()
		}()
	}
	wg.Wait()
	for _, p := range parts {
		rep.Rows = append(rep.Rows, p.rep.Rows...)
		rep.Sections = append(rep.Sections, p.rep.Sections...)
		rep.Goals = append(rep.Goals, p.rep.Goals...)
		rep.Fleet = append(rep.Fleet, p.rep.Fleet...)
		if p.rep.FleetRestart != nil {
			rep.FleetRestart = p.rep.FleetRestart
		}
		if p.rep.Metrics != nil {
			rep.Metrics = p.rep.Metrics
		}
		for k, v := range p.rep.Figures {
			rep.Figures[k] = v
		}
		for k, why := range p.rep.Unmeasured {
			if rep.Unmeasured == nil {
				rep.Unmeasured = map[string]string{}
			}
			rep.Unmeasured[k] = why
		}
	}
	rep.Wall = time.Since(rep.Started)
	return rep, errors.Join(errs...)
}

// section runs one named section.
func (r *run) section(ctx context.Context, name string) error {
	switch name {
	case "decision":
		return r.decision(ctx)
	case "claims":
		return r.claims(ctx)
	case "api":
		return r.api(ctx)
	case "placement":
		return r.placement(ctx)
	case "nova":
		return r.nova(ctx)
	case "sim":
		return r.sim(ctx)
	case "fleet":
		return r.fleet(ctx)
	case "metrics":
		return r.metricsCost(ctx)
	}
	return fmt.Errorf("unknown section %q", name)
}

// lockedWriter serialises writes from sections running at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// machine describes where the run happened, for the table's heading.
func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (GOMAXPROCS %d), %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

// WriteTable prints the report as an aligned text table.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "keel benchmark, %s, on %s%s\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"), machine(), quickNote(rep.Quick))
	tw := newTab(w)
	fmt.Fprintln(tw, "#\tmeasure\tresult\tconditions")
	for _, row := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Section, row.What, row.Result, row.Conditions)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if err := writeFleetTable(w, rep.Fleet); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "whole run: %.0f s wall; %s\n%s\n", rep.Wall.Seconds(), rep.sectionNote(), rep.goalNote())
	return err
}

// newTab is the tables' tabwriter.
func newTab(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// goalNote counts the goals met and names the missed ones.
func (rep *Report) goalNote() string {
	if len(rep.Goals) == 0 {
		return "goals: none judged"
	}
	met, missed := 0, []string{}
	for _, g := range rep.Goals {
		if g.Met {
			met++
		} else {
			missed = append(missed, g.Key+" "+g.Goal)
		}
	}
	note := fmt.Sprintf("goals: %d of %d met", met, len(rep.Goals))
	if len(missed) > 0 {
		note += "; missed: " + strings.Join(missed, ", ")
	}
	return note
}

// sectionNote says each section's wall and CPU time and the load it met.
func (rep *Report) sectionNote() string {
	var parts []string
	for _, s := range rep.Sections {
		parts = append(parts, fmt.Sprintf("%s %.0f s wall / %.0f s CPU at load %.1f", s.Name, s.WallS, s.CPUS, s.Load1))
	}
	if len(parts) == 0 {
		return "no section finished"
	}
	note := "sections: " + strings.Join(parts, ", ")
	if rep.Quick {
		note += " (run at once: CPU is the whole process's)"
	}
	return note
}

// cpuTime is the CPU time this process and its waited-for children have
// used.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// loadAverage is the 1-minute load average (0 where /proc has none).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

// WriteMarkdown prints the report as a Markdown table (docs/performance.md's).
func (rep *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "keel benchmark, %s, on %s%s; whole run %.0f s wall; %s.\n\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"), machine(), quickNote(rep.Quick), rep.Wall.Seconds(), rep.sectionNote())
	fmt.Fprintln(w, "| # | measure | result | conditions |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range rep.Rows {
		esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.Section, esc(row.What), esc(row.Result), esc(row.Conditions)); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	if err := writeFleetTable(w, rep.Fleet); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\n%s.\n", strings.ToUpper(rep.goalNote()[:1])+rep.goalNote()[1:]); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

func quickNote(quick bool) string {
	if quick {
		return " — QUICK MODE: shrunk sizes, figures only show the harness works"
	}
	return ""
}

// WriteJSON prints the figures as one JSON object: every figure under its
// key at the top level (null for a figure not reached, with the reason
// under "unmeasured"), and besides them "quick", "started", "wall_s" and
// "rows" (the table, with each figure's conditions).
func (rep *Report) WriteJSON(w io.Writer) error {
	out := map[string]any{}
	for k := range rep.Unmeasured {
		out[k] = nil
	}
	if len(rep.Unmeasured) > 0 {
		out["unmeasured"] = rep.Unmeasured
	}
	for k, v := range rep.Figures {
		out[k] = round(v)
	}
	out["quick"] = rep.Quick
	out["started"] = rep.Started.UTC().Format(time.RFC3339)
	out["wall_s"] = round(rep.Wall.Seconds())
	out["machine"] = machine()
	out["rows"] = rep.Rows
	out["sections"] = rep.Sections
	out["goals"] = rep.Goals
	if len(rep.Fleet) > 0 {
		out["fleet"] = rep.Fleet
	}
	if rep.FleetRestart != nil {
		out["fleet_restart"] = rep.FleetRestart
	}
	if rep.Metrics != nil {
		out["metrics"] = rep.Metrics
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// round keeps four significant digits: enough for a benchmark figure.
func round(v float64) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	mag := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}

// percentile returns the p-th percentile (0–100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMS prints a duration in ms with a sensible number of digits.
func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.3f ms", v)
	}
}

// fmtRate prints a rate with thousands separators.
func fmtRate(v float64, unit string) string {
	if v >= 100 {
		return commas(int64(math.Round(v))) + " " + unit
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// goal marks a figure against its goal (in quick mode it only names the
// goal: shrunk sizes prove nothing either way).
func (r *run) goal(key string, met bool, text string) string {
	if r.opts.Quick {
		return "goal " + text + ": not judged in quick mode"
	}
	r.rep.Goals = append(r.rep.Goals, Goal{Key: key, Goal: text, Met: met})
	if met {
		return "goal " + text + ": met"
	}
	return "goal " + text + ": MISSED"
}
