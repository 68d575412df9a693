package main

import (
	"strings"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
)

// TestLimitsPerProfileAndApp: the CPU and swap bounds are set for every
// spoke, per profile and per app, each overriding the one before, and
// the defaults differ per profile.
func TestLimitsPerProfileAndApp(t *testing.T) {
	cfg, _, err := configFor(testConfig(t, "apps:\n  installed: [metro_hail, weather]\n"+
		"sandbox:\n  cpu_percent: 80\n  profiles:\n    strict: {cpu_weight: 50}\n    exec: {cpu_percent: 150, swap_bytes: 67108864}\n"+
		"  apps:\n    metro_hail: {cpu_percent: 30}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name                 string
		got                  sandbox.Limits
		weight, percent, swp uint64
	}{
		{"the app's own", sandboxLimits(cfg.Sandbox, "metro_hail"), 50, 30, 0},
		{"the strict profile's", sandboxLimits(cfg.Sandbox, "weather"), 50, 80, 0},
		{"the exec profile's", ExternalApp{Name: "w"}.limits(cfg.Sandbox), 0, 150, 64 << 20},
	} {
		l := tt.got.WithDefaults(sandbox.ProfileStrict)
		if tt.weight == 0 {
			tt.weight = 100
		}
		if l.CPUWeight != tt.weight || l.CPUPercent != tt.percent || l.Swap != tt.swp {
			t.Errorf("%s: cpu weight %d, cpu percent %d, swap %d; want %d, %d, %d", tt.name, l.CPUWeight, l.CPUPercent, l.Swap, tt.weight, tt.percent, tt.swp)
		}
	}
	if d, e := sandbox.DefaultLimitsFor(sandbox.ProfileStrict), sandbox.DefaultLimitsFor(sandbox.ProfileExec); d.CPUPercent != 100 || e.CPUPercent != 200 || d.CPUWeight != 100 || d.Swap != 0 {
		t.Errorf("defaults: strict %+v, exec %+v", d, e)
	}
}

// TestCgroupConfigRefused: out-of-range CPU bounds and unknown profiles
// are refused, naming the field.
func TestCgroupConfigRefused(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"cpu weight too large", "sandbox:\n  cpu_weight: 20000\n", "sandbox.cpu_weight: must be 0 (the default) to 10000"},
		{"cpu percent too small", "sandbox:\n  apps:\n    metro_hail: {cpu_percent: 5}\n", "sandbox.apps.metro_hail.cpu_percent: must be 0 (the default) or at least 10"},
		{"unknown profile", "sandbox:\n  profiles:\n    proxy: {cpu_percent: 50}\n", "sandbox.profiles.proxy: is not a profile"},
		{"profile's bad limit", "sandbox:\n  profiles:\n    exec: {tasks: 2}\n", "sandbox.profiles.exec.tasks: must be 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := configFor(testConfig(t, "apps:\n  installed: [metro_hail]\n"+tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
