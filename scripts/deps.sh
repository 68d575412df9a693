#!/usr/bin/env bash
# Installs the C libraries the build links statically, when missing:
# libseccomp (the spokes' syscall filter) and pkg-config to find it.
set -euo pipefail
have() {
  pkg-config --exists libseccomp 2>/dev/null && compgen -G '/usr/lib/*/libseccomp.a' >/dev/null
}
if have; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "secgpt needs libseccomp-dev and pkg-config: sudo apt-get install -y libseccomp-dev pkg-config" >&2
  exit 1
fi
echo "== installing libseccomp-dev" >&2
apt-get update -qq && apt-get install -y -qq libseccomp-dev pkg-config >/dev/null
