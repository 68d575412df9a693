// Package sandbox confines one spoke process: it owns the environment scrub,
// the closing of inherited file descriptors, the resource limits,
// no_new_privs, Landlock, the seccomp allowlist, the namespaces a spoke
// runs in, the host uid each live spoke has of its own under a root hub
// ([IDRange], leased by Prepare and returned by [Release]) and the spoke's
// mount view (a root of its own holding only what its policy names, built
// by Enter).
//
// It has a parent side and a child side. The parent (the hub's spoke
// manager) calls [Prepare] on the exec.Cmd that re-executes the binary (or,
// for a spoke started ahead of need, Prepare under a policy without scratch
// and [PrepareScratchFor] once the spoke's policy is known), and [Release]
// once the spoke is reaped. The child calls
// [SetUpNamespaces] first thing (its own /proc in its PID namespace), and
// [Enter] before it reads its first ISC frame, and then runs its one app; a
// spoke that hosts an external app's egress calls [UpLoopback] in its own
// network namespace, opens its listeners (ports 80, 443 and 53 there) and
// calls [DropCapabilities] before Enter, and that app's server is started
// with [Exec] after its own Enter, from a process started with
// [PrepareLaunch] (a mount namespace of its own, for its own view).
// [Probe] reports what the kernel offers and [Capabilities.Check] refuses a
// policy that cannot be enforced unless the operator opted into a weaker
// sandbox with Policy.AllowWeaker.
//
// This package must never fail open: when a protection that a policy needs
// cannot be applied, Prepare, Check and Enter return an error and the caller
// must not run the app. It must never log, exit or read configuration: it
// returns errors and reports, and the caller decides. It must never import
// other secgpt packages; its policy crosses the process boundary on argv as
// JSON (see [Policy.Encode]).
//
// Everything that is enforced is data: the seccomp rules are one table with a
// reason on every entry (allowlist.go and allowlist_amd64.go), and the Landlock
// paths are computed from the policy in one function (landlockRules).
package sandbox
