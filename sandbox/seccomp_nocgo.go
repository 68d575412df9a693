//go:build linux && !cgo

package sandbox

import "errors"

// errNoLibseccomp explains why a build without cgo has no seccomp filter.
var errNoLibseccomp = errors.New("built without cgo: libseccomp is not linked")

func seccompSupport() (bool, string) { return false, errNoLibseccomp.Error() }

func installSeccomp(Profile) (string, error) { return "", errNoLibseccomp }
