//go:build linux && cgo && !landlocktsync

package sandbox

// psxListsTasks says libpsx lists /proc/PID/task after each Landlock
// round, so that a ruleset must let it (go-landlock adds that rule under
// the same build constraints: its bug39_workaround.go).
const psxListsTasks = true
