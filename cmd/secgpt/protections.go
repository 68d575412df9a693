package main

import (
	"fmt"

	"github.com/secgpt/secgpt/sandbox"
)

// protectionLines is the start-up protection report: one line per
// protection of the spokes and of the machine's shared resources, each on
// or off and why. A protection this build does not have reads "off: not
// built", with what bounds the resource instead: the report never claims
// what is not there.
func protectionLines(cfg Config, caps sandbox.Capabilities) []string {
	lines := caps.Lines()
	return append(lines,
		"uid separation: off: not built (every spoke runs as the one unprivileged uid 65534; Landlock keeps a spoke out of other spokes' files, not out of stat)",
		"mount view: off: not built (a spoke sees the host's file tree; Landlock refuses opening what is outside its scratch, not stat or readlink)",
		"cgroup limits: "+cgroupLimits(cfg),
		fmt.Sprintf("disk quotas: off: not built (RLIMIT_FSIZE bounds one file at %d MiB, not the total a spoke writes)", sandboxLimits(cfg.Sandbox, "").FileSize>>20),
		fmt.Sprintf("budgets: off: not built (no per-user, per-app or per-day token budget; a query may make %d model calls of up to %d KiB of prompt)",
			cfg.Budgets.MaxLLMCallsPerQuery, cfg.Budgets.MaxPromptBytes>>10),
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
