//go:build linux && (!cgo || landlocktsync)

package sandbox

// psxListsTasks is false without the C libpsx: the Go runtime's
// AllThreadsSyscall lists no directory (see psxtasks_cgo_linux.go).
const psxListsTasks = false
