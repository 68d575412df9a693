#!/usr/bin/env bash
# Runs every test of secgpt: vet, the race-enabled unit and end-to-end tests
# (against a real Dendrite homeserver and a real Ollama on loopback), short
# fuzz runs, and the built binary's case studies and sandbox check. Installs
# what a bare machine of this kind lacks. Used as is by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# libseccomp for the sandbox (cgo).
scripts/deps.sh

# The homeserver for the end-to-end tests, cached outside the repository.
echo "== Dendrite"
SECGPT_DENDRITE_BIN=$(scripts/build-dendrite.sh)
export SECGPT_DENDRITE_BIN

# The model server for the end-to-end tests, cached the same way.
echo "== Ollama"
SECGPT_OLLAMA_BIN=$(scripts/build-ollama.sh)
export SECGPT_OLLAMA_BIN

# The ecosystem's MCP servers (npm, Node 24, a Go SDK server), pinned and
# cached the same way: SECGPT_MCP_SERVERS, SECGPT_NODE24, SECGPT_MCP_PYTHON.
echo "== MCP servers"
mcp_env=$(scripts/mcp-servers.sh)
while IFS='=' read -r name value; do export "$name=$value"; done <<<"$mcp_env"

# goolm: mautrix's pure-Go Olm, so no libolm is needed; e2e: the slow suites.
export GOFLAGS="-tags=goolm,e2e"
export CGO_ENABLED=1

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -timeout 30m ./...

echo "== fuzz (20,000 inputs each: a count, not a time, so a loaded machine cannot fail it)"
for target in "FuzzDecodeFrame ./spoke/" "FuzzParsePlan ./hub/" "FuzzExtractJSON ./llm/" "FuzzGrammarPattern ./llm/" "FuzzCheckURL ./hub/egress/" "FuzzClassify ./bot/"; do
  set -- $target
  go test -run '^$' -fuzz "^$1\$" -fuzztime 20000x "$2"
done

echo "== the binary: case studies"
make build
# The spoke binary carries none of the bot's or the store's libraries.
# Only its dependencies: the build line names the sqlite_omit_load_extension tag.
if go version -m bin/secgpt-spoke | awk '$1 == "dep" || $1 == "=>" { print $2 }' | grep -E 'maunium|mautrix|goldmark|sqlite'; then
  echo "bin/secgpt-spoke links a library only the bot or the store needs" >&2
  exit 1
fi
bin/secgpt casestudy --mode both

echo "== the binary: a short benchmark (a smoke test, not a timed assertion)"
bench_json=$(mktemp)
bin/secgpt bench --latency 0 --per-category 2 --users 1,10 --json "$bench_json"
rm -f "$bench_json"

echo "== the binary: sandbox check"
bin/secgpt sandbox-check
