package spoke_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/secgpt/secgpt/sandbox"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/spoketest"
)

// TestTwoUsersTwoUIDs: under a root hub, the spokes of two users live at
// once under two host uids of the spokes' range, each owning its own
// scratch, so that nothing on the host belongs to both.
func TestTwoUsersTwoUIDs(t *testing.T) {
	requireSandbox(t)
	if os.Geteuid() != 0 {
		t.Skipf("one uid for every spoke when the hub is not root (uid %d)", os.Geteuid())
	}
	inner := spoketest.Policy(t)
	m := newManager(t, spoke.Options{Policy: func(k spoke.Key) (sandbox.Policy, error) {
		p, err := inner(k)
		// A scratch on the host, as an external app's (a built-in app's
		// own tmpfs is not).
		p.Namespaces, p.KeepScratch = true, true
		return p, err
	}})
	r := sandbox.DefaultIDRange
	uids := map[int]string{}
	for _, user := range []string{"@alice:x", "@bob:x"} {
		k := key(user, "echo")
		if _, _, err := m.Run(context.Background(), k, step("say", `{"text":"hi"}`), &handler{}); err != nil {
			t.Fatal(err)
		}
		pid := m.PIDs()[k]
		uid, err := strconv.Atoi(strings.Fields(procField(t, pid, "Uid"))[0])
		if err != nil || uid < int(r.First) || uid >= int(r.First+r.Count) {
			t.Fatalf("%s's spoke %d runs as uid %s on the host, want one of %+v", user, pid, procField(t, pid, "Uid"), r)
		}
		if other, ok := uids[uid]; ok {
			t.Fatalf("%s's and %s's spokes share host uid %d", other, user, uid)
		}
		uids[uid] = user
		p, err := inner(k)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p.Scratch)
		if err != nil {
			t.Fatal(err)
		}
		if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != uid {
			t.Errorf("%s's scratch is owned by %d, not by its spoke's %d", user, owner, uid)
		}
	}
}
