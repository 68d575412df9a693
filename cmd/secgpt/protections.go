package main

import (
	"fmt"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/scratch"
)

// protectionLines is the start-up protection report: one line per
// protection of the spokes (the kernel's, from caps: seccomp, Landlock,
// namespaces, cgroups, uid separation, mount view) and of the machine's
// shared resources (cgroup limits, disk quotas, budgets), each on or off
// (the disk quota: enforced, or only checked) and why.
func protectionLines(cfg Config, caps sandbox.Capabilities) []string {
	b := cfg.Budgets
	return append(caps.Lines(),
		"cgroup limits: "+cgroupLimits(cfg),
		scratch.Report(caps.OwnScratch(sandbox.Policy{Profile: sandbox.ProfileStrict, Namespaces: cfg.Sandbox.Namespaces})),
		fmt.Sprintf("budgets: on (model tokens: %d per request, %d per user a day, %d per app and user a day; the hub's time: %v per step; each app's data: %d MiB and %d documents per user)",
			b.TokensPerQuery, b.TokensPerUserDay, b.TokensPerAppDay, b.HubTimePerStep, b.DataBytesPerApp>>20, b.DataDocsPerApp),
	)
}

// cgroupLimits says what a spoke's cgroup bounds, per profile, or what
// bounds a spoke without one.
func cgroupLimits(cfg Config) string {
	if ok, _ := sandbox.CgroupSupport(); !ok {
		return "off (no cgroup per spoke: see above)"
	}
	strict := sandboxLimits(cfg.Sandbox, "")
	exec := ExternalApp{}.limits(cfg.Sandbox)
	return fmt.Sprintf("on (built-in apps: %s; external apps: %s; sandbox.profiles and sandbox.apps override them)", cgroupBounds(strict), cgroupBounds(exec))
}

func cgroupBounds(l sandbox.Limits) string {
	return fmt.Sprintf("memory %d MiB, swap %d MiB, %d tasks, %d%% of a processor at weight %d", l.Memory>>20, l.Swap>>20, l.Tasks, l.CPUPercent, l.CPUWeight)
}
