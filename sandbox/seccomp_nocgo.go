//go:build linux && !cgo

package sandbox

import (
	"errors"
	"strconv"
)

// errNoLibseccomp explains why a build without cgo has no seccomp filter.
var errNoLibseccomp = errors.New("built without cgo: libseccomp is not linked")

func seccompSupport() (bool, string) { return false, errNoLibseccomp.Error() }

func installSeccomp(Profile, bool) (string, int, error) { return "", -1, errNoLibseccomp }

// compiledFilter is never made without libseccomp.
type compiledFilter struct{ profile Profile }

func compileFilter(Profile, int) (*compiledFilter, error) { return nil, errNoLibseccomp }

func (*compiledFilter) load() (string, error) { return "", errNoLibseccomp }

// SyscallName names the syscall numbered nr; without libseccomp, by number.
func SyscallName(nr int32) string { return "syscall " + strconv.Itoa(int(nr)) }
