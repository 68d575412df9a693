package main

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/secgpt/secgpt/spoke/mcptest"
)

// TestAppsAddByPath: `secgpt apps add PATH` prints a config entry that,
// pasted under apps.external, installs the server as printed.
func TestAppsAddByPath(t *testing.T) {
	requireSpokeSandbox(t)
	script := mcptest.Script(t, mcptest.Dir(t), "words.py")
	r := runBinary(t, "", "apps", "add", "--python", mcptest.Python(t), script)
	if r.code != exitOK {
		t.Fatalf("apps add: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var entries []map[string]any
	if err := yaml.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("not one YAML entry: %v\n%s", err, r.stdout)
	}
	if entries[0]["name"] != "words" || !strings.Contains(r.stdout, "# code identity: sha256:") || !strings.Contains(r.stdout, "memory_bytes: 1073741824, open_files: 1024") {
		t.Fatalf("entry:\n%s", r.stdout)
	}
	cfg := testConfig(t, "apps:\n  installed: []\n  external:\n"+indent(r.stdout, "    "))
	r = runBinary(t, "", "apps", "--config", cfg)
	if r.code != exitOK || !strings.Contains(r.stdout, "functions:   word_count shout") {
		t.Fatalf("apps with the entry: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestAppsAddRefuses(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{
		{"npm:@modelcontextprotocol/server-memory", "has no version"},
		{"npm:@modelcontextprotocol/server-memory@latest", "is not an exact version"},
		{"npm:left-pad@^1.0.0", "is not an exact version"},
		{"npm:Bad Name@1.0.0", "is not an npm package name"},
		{"/etc/hostname", "is neither a Python or Node script nor an executable"},
	} {
		r := runBinary(t, "", "apps", "add", tt.arg)
		if r.code == exitOK || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("apps add %s: exit %d, stderr %q; want %q", tt.arg, r.code, r.stderr, tt.want)
		}
	}
}

func TestAppNameOf(t *testing.T) {
	for in, want := range map[string]string{
		"@modelcontextprotocol/server-memory":              "memory",
		"@modelcontextprotocol/server-sequential-thinking": "sequential_thinking",
		"mcp-fetch-server":                                 "fetch",
		"notes":                                            "notes",
		"mcp-server":                                       "mcp_app",
		"2fa":                                              "app_2fa",
	} {
		if got := appNameOf(in); got != want {
			t.Errorf("appNameOf(%q) = %q, want %q", in, got, want)
		}
	}
}
