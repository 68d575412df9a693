package spoke_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// TestServerFiles: a server keeps state where ecosystem servers do
// ($XDG_DATA_HOME, through $TMPDIR), per user and across spokes; a
// declared read_write directory, also one named with {scratch}, is
// writable; a directory named in args is readable but not writable, and a
// write anywhere else is refused.
func TestServerFiles(t *testing.T) {
	requireSandbox(t)
	shared := mcptest.Dir(t) // read-write for the app, outside every scratch
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	docs := mcptest.Dir(t) // named in args: readable only
	app := pythonApp(t, "files", "files.py", docs)
	app.Decl.ReadWrite = []string{shared, "{scratch}/exports"}
	app.Env = map[string]string{"NOTES_AT": "{scratch}/notes.jsonl"}
	w := mcptest.NewWiring(t, app)
	w.Discover(t, "files")
	m := w.Manager(t, nil)
	call := func(user, function, args string) (string, bool) {
		t.Helper()
		res, _, err := runFunction(t, m, user, "files", function, args)
		if err != nil {
			t.Fatalf("%s: %v\n%s", function, err, w.Logs)
		}
		var out struct {
			Text string `json:"untrusted_text"`
		}
		_ = json.Unmarshal(res.Output, &out)
		if res.Error != "" {
			return res.Error, false
		}
		return out.Text, true
	}
	const alice, bob = "@alice:example.org", "@bob:example.org"
	for _, note := range []string{"one", "two"} {
		if got, ok := call(alice, "remember", `{"note":"`+note+`"}`); !ok || !strings.Contains(got, note) {
			t.Fatalf("remember %s: %q %v", note, got, ok)
		}
	}
	if got, _ := call(bob, "remember", `{"note":"bob's"}`); got != `["bob's"]` {
		t.Errorf("bob sees %s, want only his own note", got)
	}
	where, _ := call(alice, "where", `{}`)
	var env map[string]string
	if err := json.Unmarshal([]byte(where), &env); err != nil {
		t.Fatalf("where: %q", where)
	}
	scratch := env["HOME"]
	if !strings.HasPrefix(scratch, w.ScratchRoot()) || env["XDG_DATA_HOME"] != filepath.Join(scratch, ".local/share") || env["TMPDIR"] != filepath.Join(scratch, "tmp") ||
		env["NOTES_AT"] != filepath.Join(scratch, "notes.jsonl") {
		t.Errorf("environment %v, want HOME, XDG_* and TMPDIR in the scratch under %s", env, w.ScratchRoot())
	}

	// A new spoke (a restart of secgpt) finds alice's notes.
	m.StopUser(alice)
	if got, _ := call(alice, "remember", `{"note":"three"}`); got != `["one", "two", "three"]` {
		t.Errorf("after a restart alice has %s", got)
	}

	tests := []struct {
		name, path string
		written    bool
	}{
		{"declared read_write directory", filepath.Join(shared, "out.txt"), true},
		{"declared {scratch}/exports", filepath.Join(scratch, "exports", "out.txt"), true},
		{"directory named in args", filepath.Join(docs, "out.txt"), false},
		{"/tmp", filepath.Join(os.TempDir(), "secgpt-files-test.txt"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]string{"path": tt.path, "text": "x"})
			got, _ := call(alice, "write_file", string(args))
			_, err := os.Stat(tt.path)
			if (got == "written") != tt.written || (err == nil) != tt.written {
				t.Errorf("write %s: %q (file there: %v), want written %v", tt.path, got, err == nil, tt.written)
			}
		})
	}
}

// TestDiagnosisNamesRefusedSyscall: a server that dies of a syscall the
// sandbox refused is reported with its exit status, the syscall by name and
// its own last words, not the launcher's banner.
func TestDiagnosisNamesRefusedSyscall(t *testing.T) {
	requireSandbox(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture calls personality by its x86-64 number")
	}
	w := mcptest.NewWiring(t, pythonApp(t, "refused", "refused.py"))
	_, err := w.TryDiscover("refused")
	var d *spoke.Diagnosis
	if err == nil || !errors.As(err, &d) {
		t.Fatalf("discovery error %v, want a diagnosis", err)
	}
	if d.App != "refused" || d.Exit != "exit status 5" || !slices.Contains(d.Refused, "personality") {
		t.Errorf("diagnosis %+v, want exit status 5 and personality refused", d)
	}
	if len(d.Stderr) == 0 || !strings.Contains(d.Stderr[len(d.Stderr)-1], "personality failed: Operation not permitted") {
		t.Errorf("stderr tail %q, want the server's own last line", d.Stderr)
	}
	for _, line := range d.Stderr {
		if strings.HasPrefix(line, "secgpt-launch: the app's server is confined") {
			t.Errorf("the launcher's banner crowds the server's last words: %q", d.Stderr)
		}
	}
	t.Logf("%v", err)
}
