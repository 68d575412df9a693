//go:build linux

package sandbox

// SetCapabilities makes Prepare see c instead of Probe's result, to
// simulate a kernel without a protection, until restore is called.
func SetCapabilities(c Capabilities) (restore func()) {
	old := capabilities
	capabilities = func() Capabilities { return c }
	return func() { capabilities = old }
}

// SetIDFiles makes IDRange.Check read paths (passwd, group, subuid, subgid
// in that order) instead of the machine's, until restore is called.
func SetIDFiles(paths [4]string) (restore func()) {
	old := idFiles
	idFiles = append(idFiles[:0:0], idFiles...)
	for i := range idFiles {
		idFiles[i].path = paths[i]
	}
	return func() { idFiles = old }
}

// IDsInUse is how many spoke ids are leased.
func IDsInUse() int { return spokeIDs.inUse() }
