#!/usr/bin/env bash
# Builds the pinned Ollama server once, for CPU, from the Go module proxy,
# and caches it outside the repository, keyed by version. Prints the binary.
# A cold build takes about 3 minutes on 2 cores; a cache hit takes no time.
#
# Go module downloads leave out every vendor/ directory, and llama.cpp keeps
# three third-party headers in one: nlohmann/json and stb come from Debian,
# miniaudio (used only to decode audio input) is a stand-in in
# tools/ollama/include that refuses every audio input.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
version=$(awk '/github.com\/ollama\/ollama /{print $2}' "$here/tools/ollama/go.mod")
cache=${SECGPT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/secgpt}
bin="$cache/ollama-$version/bin"
if [ -x "$bin/ollama" ]; then echo "$bin/ollama"; exit 0; fi
if ! [ -f /usr/include/nlohmann/json.hpp ] || ! [ -f /usr/include/stb/stb_image.h ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "building Ollama needs nlohmann-json3-dev and libstb-dev: sudo apt-get install -y nlohmann-json3-dev libstb-dev" >&2
    exit 1
  fi
  echo "== installing nlohmann-json3-dev libstb-dev" >&2
  apt-get update -qq && apt-get install -y -qq nlohmann-json3-dev libstb-dev >/dev/null
fi
mkdir -p "$bin.tmp"
echo "building Ollama $version into $bin (about 3 minutes the first time)" >&2
(cd "$here/tools/ollama" && CGO_ENABLED=1 GOFLAGS=-mod=mod CGO_CPPFLAGS="-I$here/tools/ollama/include" \
  go build -ldflags "-X github.com/ollama/ollama/version.Version=${version#v}" -o "$bin.tmp/ollama" github.com/ollama/ollama) >&2
rm -rf "$bin" && mv "$bin.tmp" "$bin"
echo "$bin/ollama"
