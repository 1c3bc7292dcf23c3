package config

import (
	"context"
	"errors"
	"strings"
	"testing"

	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/compute/libvirt"
	"keel/internal/compute/qemu"
)

// TestCheckMetrics: a weight_setting metric no host will report fails
// the server's start when it would fail every decision (required = true,
// or MetricFilter), naming where it was set and what to do, and is a
// warning when required = false.
func TestCheckMetrics(t *testing.T) {
	cases := []struct {
		name, conf string
		err        []string // substrings of the error; none: no error
		warn       string   // substring of the one warning; "": none
	}{
		{name: "reported", conf: "[metrics]\nweight_setting = cpu.percent=-1.0\nrequired = true\n"},
		{name: "unset", conf: "[metrics]\nrequired = true\n"},
		{name: "nova name the drivers do not report, required",
			conf: "[metrics]\nweight_setting = cpu.percent=-1.0, cpu.user.time=1.0\nrequired = true\n",
			err: []string{"keel.conf:2: [metrics] weight_setting: no host will report cpu.user.time ([keel] driver = fake reports cpu.frequency, cpu.user.percent",
				"with [metrics] required = true every scheduling decision would fail with no valid host",
				"Remove it from weight_setting, or set [metrics] required = false"}},
		{name: "required by default", conf: "[metrics]\nweight_setting = cpu.precent=-1.0\n",
			err: []string{"no host will report cpu.precent ("}},
		{name: "qemu measures cpu.percent", conf: "[keel]\ndriver = qemu\n[metrics]\nweight_setting = cpu.percent=-1.0\n"},
		{name: "libvirt does not measure Nova's times", conf: "[keel]\ndriver = libvirt\n[metrics]\nweight_setting = cpu.user.time=1.0\n",
			err: []string{"no host will report cpu.user.time ([keel] driver = libvirt reports cpu.frequency, cpu.user.percent"}},
		{name: "reports off", conf: "[metrics]\nreport_interval = 0\nweight_setting = cpu.percent=-1.0\n",
			err: []string{"([metrics] report_interval = 0 turns the agents' reports off)"}},
		{name: "not required: a warning", conf: "[metrics]\nweight_setting = cpu.user.time=1.0\nrequired = false\n",
			warn: "every host weighs weight_of_unavailable (-10000) for it"},
		{name: "MetricFilter rejects every host", conf: "[filter_scheduler]\nenabled_filters = ComputeFilter, MetricFilter\n[metrics]\nweight_setting = cpu.user.time=1.0\nrequired = false\n",
			err: []string{"MetricFilter (in [filter_scheduler] enabled_filters) would reject every host", "or MetricFilter from enabled_filters"}},
		{name: "MetricsWeigher not run", conf: "[filter_scheduler]\nweight_classes = RAMWeigher\n[metrics]\nweight_setting = cpu.user.time=1.0\nrequired = true\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := Parse("keel.conf", []byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			warns, err := cfg.CheckMetrics()
			if len(tc.err) == 0 && err != nil {
				t.Fatalf("err = %v, want none", err)
			}
			for _, want := range tc.err {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			}
			var ce *Error
			if err != nil && !errors.As(err, &ce) {
				t.Errorf("err is a %T, want a *config.Error", err)
			}
			switch {
			case tc.warn == "" && len(warns) > 0:
				t.Errorf("warnings %q, want none", warns)
			case tc.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], tc.warn)):
				t.Errorf("warnings %q, want one saying %q", warns, tc.warn)
			}
		})
	}
}

// TestDriverMetricsMatchTheDrivers: DriverMetrics says what each driver
// measures: the fake and qemu drivers (on this host's /proc) report
// exactly those names, and every driver listed with names is a
// compute.Measurer (libvirt's own test checks its names on a libvirtd).
func TestDriverMetricsMatchTheDrivers(t *testing.T) {
	drv, err := fake.New(fake.Config{HostCPUs: 8, HostMemoryMB: 16384})
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]compute.Measurer{"fake": drv, "qemu": &qemu.Driver{}} {
		meas, err := m.Measure(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, x := range meas.Host {
			got = append(got, x.Name)
		}
		if strings.Join(got, ",") != strings.Join(DriverMetrics[name], ",") {
			t.Errorf("the %s driver reports %v; DriverMetrics says %v", name, got, DriverMetrics[name])
		}
	}
	for name, d := range map[string]any{"fake": drv, "qemu": &qemu.Driver{}, "libvirt": &libvirt.Driver{}} {
		if _, measures := d.(compute.Measurer); measures != (len(DriverMetrics[name]) > 0) {
			t.Errorf("%s: a Measurer %v, DriverMetrics %v: keep them in step", name, measures, DriverMetrics[name])
		}
	}
	if len(DriverMetrics) != 3 {
		t.Errorf("DriverMetrics has %d drivers, want fake, qemu and libvirt", len(DriverMetrics))
	}
}

// TestFakeWorkloadRefusedWithLine: an impossible [keel] fake_workload (a
// negative CPU, a percentage above 100 %, an unknown kind) is refused when
// the file is read, with the file and line.
func TestFakeWorkloadRefusedWithLine(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"constant cpu=-1", "keel.conf:3: [keel] fake_workload: cpu=-1: must not be negative"},
		{"constant cpu=150%", "keel.conf:3: [keel] fake_workload:"},
		{"steady cpu=1", `keel.conf:3: [keel] fake_workload: unknown workload kind "steady"`},
	} {
		_, _, err := Parse("keel.conf", []byte("[keel]\ndriver = fake\nfake_workload = "+tc.value+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("fake_workload = %s: err = %v, want %q", tc.value, err, tc.want)
		}
	}
	if _, _, err := Parse("keel.conf", []byte("[keel]\nfake_workload = diurnal cpu=0.5 peak=2\n")); err != nil {
		t.Errorf("a possible workload refused: %v", err)
	}
}
