package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/scheduler"
	"keel/internal/store/memory"
)

//go:embed nova_sched.py
var novaScript []byte

// novaResult is what nova_sched.py prints.
type novaResult struct {
	Filters    []string `json:"filters"`
	Weighers   []string `json:"weighers"`
	Hosts      int      `json:"hosts"`
	Decisions  int      `json:"decisions"`
	Passed     int      `json:"passed"`
	Best       []string `json:"best"`
	FilterMS   float64  `json:"filter_ms"`
	WeighMS    float64  `json:"weigh_ms"`
	DecisionMS float64  `json:"decision_ms"`
}

// runNova runs Nova's filters and weighers over hs with Debian's Python.
func runNova(ctx context.Context, hs []hostShape, flavor placement.Resources, decisions int) (novaResult, error) {
	var res novaResult
	if err := needPackages("nova.scheduler.filters, nova.tests.unit.scheduler.fakes", "python3-nova"); err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "keelbench-nova-")
	if err != nil {
		return res, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	type novaHost struct {
		Name       string  `json:"name"`
		VCPUs      int64   `json:"vcpus"`
		VCPUsUsed  int64   `json:"vcpus_used"`
		CPURatio   float64 `json:"cpu_allocation_ratio"`
		MemoryMB   int64   `json:"memory_mb"`
		FreeRAMMB  int64   `json:"free_ram_mb"`
		LocalGB    int64   `json:"local_gb"`
		FreeDiskGB int64   `json:"free_disk_gb"`
	}
	in := struct {
		Request map[string]int64 `json:"request"`
		Hosts   []novaHost       `json:"hosts"`
	}{Request: map[string]int64{"vcpus": flavor[placement.VCPU], "memory_mb": flavor[placement.MemoryMB], "disk_gb": flavor[placement.DiskGB]}}
	for _, h := range hs {
		in.Hosts = append(in.Hosts, novaHost{Name: h.Name, VCPUs: h.VCPUs, VCPUsUsed: h.UsedVCPU, CPURatio: h.CPURatio,
			MemoryMB: h.MemoryMB, FreeRAMMB: h.MemoryMB - h.UsedMB, LocalGB: h.DiskGB, FreeDiskGB: h.DiskGB - h.UsedGB})
	}
	data, err := json.Marshal(in)
	if err != nil {
		return res, fmt.Errorf("encoding hosts: %w", err)
	}
	hostsPath, script := filepath.Join(dir, "hosts.json"), filepath.Join(dir, "nova_sched.py")
	if err := os.WriteFile(hostsPath, data, 0o644); err != nil {
		return res, fmt.Errorf("writing hosts: %w", err)
	}
	if err := os.WriteFile(script, novaScript, 0o644); err != nil {
		return res, fmt.Errorf("writing script: %w", err)
	}
	cmd := exec.CommandContext(ctx, debPython, script, hostsPath, fmt.Sprint(decisions))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("nova_sched.py: %v: %s", err, tailString(stderr.String()))
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("nova_sched.py's answer %q: %w", tailString(string(out)), err)
	}
	return res, nil
}

func tailString(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// nova ranks the same synthetic hosts with Nova 26's scheduler code and
// with keel's and compares one decision's time.
func (r *run) nova(ctx context.Context) error {
	n := r.size(1000, 50)
	novaDecisions := r.size(30, 2)
	keelDecisions := r.size(2000, 50)
	hs := synthHosts(n, 64, 262144, 2000, 5)
	flavor := placement.Resources{placement.VCPU: 2, placement.MemoryMB: 4096, placement.DiskGB: 20}

	st := memory.New()
	clk := clock.NewVirtual(clock.Epoch)
	if err := seed(ctx, st, hs, clk.Now()); err != nil {
		return err
	}
	cfg := scheduler.DefaultConfig()
	cfg.Weighers = []string{"RAMWeigher", "CPUWeigher", "DiskWeigher"}
	s, err := newScheduler(ctx, st, cfg, clk)
	if err != nil {
		return err
	}
	// Before any claim: does keel rank the same best host as Nova?
	exp, err := s.Explain(ctx, &scheduler.Request{Resources: flavor})
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	keelBest := ""
	for _, h := range exp.Hosts {
		if h.Rank == 1 {
			keelBest = h.Host
		}
	}
	lat, _, err := decisions(ctx, s, st, flavor, r.size(100, 5), keelDecisions, "nova")
	if err != nil {
		return err
	}
	keelMS := ms(percentile(lat, 50))

	r.progress("nova: running Nova's filters and weighers over %d hosts", n)
	nres, err := runNova(ctx, hs, flavor, novaDecisions)
	if err != nil {
		return err
	}
	if nres.Hosts != n || nres.Passed != exp.Candidates {
		return fmt.Errorf("Nova passed %d of %d hosts, keel %d of %d", nres.Passed, nres.Hosts, exp.Candidates, n)
	}
	same := "no: Nova's is " + strings.Join(nres.Best[:min(1, len(nres.Best))], "") + ", keel's " + keelBest
	if len(nres.Best) > 0 && nres.Best[0] == keelBest {
		same = "yes (" + keelBest + ")"
	}
	ratio := nres.DecisionMS / keelMS
	r.figure("nova_decision_ms_1k", nres.DecisionMS)
	r.figure("keel_decision_ms_1k_nova_hosts", keelMS)
	r.figure("nova_scheduler_ratio", ratio)
	r.row("5", fmt.Sprintf("one scheduling decision over %s hosts: Nova 26 vs keel", commas(int64(n))),
		fmt.Sprintf("Nova %s (filters %s + weighers %s), keel %s: keel %.0f× faster", fmtMS(nres.DecisionMS), fmtMS(nres.FilterMS), fmtMS(nres.WeighMS), fmtMS(keelMS), ratio),
		fmt.Sprintf("the same synthetic hosts (64 vCPU ×4, 256 GiB, 2 TB, random usage), request 2 vCPU / 4 GiB / 20 GB; Nova: python3-nova %s's default enabled_filters (%s) via HostFilterHandler and RAM/CPU/Disk weighers via HostWeightHandler on FakeHostState, median of %d; keel: the same filters (+ AvailabilityZoneFilter, inactive without a zone) and weighers, median of %s decisions, each also refreshing its view and claiming in its memory store; %d hosts pass both; same best host: %s",
			novaPackageVersion(), strings.Join(nres.Filters, ", "), novaDecisions, commas(int64(keelDecisions)), nres.Passed, same))
	r.progress("nova: Nova %.1f ms, keel %.3f ms, %.0f×", nres.DecisionMS, keelMS, ratio)
	return nil
}

func novaPackageVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "python3-nova").Output()
	if err != nil || len(out) == 0 {
		return "26"
	}
	return string(out)
}
