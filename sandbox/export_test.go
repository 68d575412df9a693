//go:build linux

package sandbox

// SetCapabilities makes Prepare see c instead of Probe's result, to
// simulate a kernel without a protection, until restore is called.
func SetCapabilities(c Capabilities) (restore func()) {
	old := capabilities
	capabilities = func() Capabilities { return c }
	return func() { capabilities = old }
}
