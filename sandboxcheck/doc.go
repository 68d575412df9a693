// Package sandboxcheck proves the spoke sandbox against a hostile app: it
// runs apps/hostile through a real hub and real sandboxed spokes, attack
// by attack, and judges each attempt; then the same attacks from the
// hostile MCP servers of apps/hostile/scripts in CPython and Node
// (Interpreters, InterpreterAttacks), run as external apps. It owns the catalogue of attacks
// (Attacks, and Controls that must succeed), the targets they aim at (Lab:
// secret files, counting listeners, an offline stand-in for DNS and the
// internet for the egress broker) and the verdicts (Runner). `secgpt
// sandbox-check` prints its verdicts as a table; its tests run each attack
// as its own case against the test spoke binary.
//
// A verdict says blocked only on positive evidence, all of it: the attempt
// was stopped by the kind of mechanism expected (an errno the app
// reports, a killed spoke, a refusal of the egress broker), nothing was
// seen to happen from outside the spoke (files unchanged, listeners never
// reached, no extra process, the hub not traced), the target's content
// reached the attacker nowhere, a log line shows the attempt, and the hub
// served another user afterwards. Anything missing is "not blocked".
//
// It is a harness: it decides nothing for the product, and must never be
// imported by the hub, the spoke runtime or an app.
package sandboxcheck
