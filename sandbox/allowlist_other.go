//go:build linux && !amd64

package sandbox

// archRules are empty on architectures other than x86-64: the generic table
// uses only syscalls every Linux architecture has. The table was measured on
// x86-64 only (see allowlist.go).
var archRules []rule
