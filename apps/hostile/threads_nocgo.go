//go:build linux && !cgo

package hostile

// threads needs cgo to start threads the Go runtime does not manage: the
// runtime dies when it cannot start one, before the app could report.
func threads(int) Result {
	return Result{Attack: Threads, Outcome: Failed, Detail: "this build cannot start threads outside the Go runtime (no cgo)"}
}
