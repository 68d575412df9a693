package spoketest

import (
	"testing"

	"github.com/secgpt/secgpt/apps"
)

// TestVendorsAreValidApps: every vendor installs like any app would: a
// valid spec with usable schemas.
func TestVendorsAreValidApps(t *testing.T) {
	for _, v := range Vendors() {
		s := v.Spec()
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		for _, f := range s.Functions {
			for _, schema := range [][]byte{f.Request, f.Response} {
				if err := apps.CheckSchema(schema); err != nil {
					t.Errorf("%s.%s: %v", s.Name, f.Name, err)
				}
			}
		}
	}
}
