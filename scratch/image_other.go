//go:build !linux

package scratch

// ImageSupport is false: no filesystem images here.
func ImageSupport() (bool, string) { return false, "no filesystem images on this system" }

func (r *Root) mountImage(id, dir string, q Quota) error { panic("unreachable: no images here") }

func unmount(dir string) error { return nil }
