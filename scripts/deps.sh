#!/usr/bin/env bash
# Installs the C libraries the build links statically, when missing:
# libseccomp (the spokes' syscall filter) and pkg-config to find it; and
# curl, whose library the egress tests drive as one of the HTTP clients an
# MCP server may use (spoke/transparent_test.go); and e2fsprogs, whose
# mkfs.ext4 makes the filesystem image that bounds an external app's
# scratch when secgpt runs as root (package scratch).
set -euo pipefail
have() {
  pkg-config --exists libseccomp 2>/dev/null && compgen -G '/usr/lib/*/libseccomp.a' >/dev/null &&
    ldconfig -p 2>/dev/null | grep -q 'libcurl\.so\.4 ' &&
    { command -v mkfs.ext4 || [ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ]; } >/dev/null
}
if have; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "secgpt needs libseccomp-dev, pkg-config, curl and e2fsprogs: sudo apt-get install -y libseccomp-dev pkg-config curl e2fsprogs" >&2
  exit 1
fi
echo "== installing libseccomp-dev, pkg-config, curl and e2fsprogs" >&2
apt-get update -qq && apt-get install -y -qq libseccomp-dev pkg-config curl e2fsprogs >/dev/null
