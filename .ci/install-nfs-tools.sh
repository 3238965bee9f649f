#!/usr/bin/env bash
# Installs libnfs-utils (nfs-cp, nfs-ls, nfs-cat) for the NFS gateway tests
# (`make nfs-test`, `make bench-nfs`, TestNFSLibnfs in test/nfs_test.go).
# Idempotent: does nothing when the tools are there. Needs root (or sudo)
# and Debian's package archive; exits non-zero when it cannot install.
set -euo pipefail
if command -v nfs-cp >/dev/null && command -v nfs-ls >/dev/null && command -v nfs-cat >/dev/null; then
	echo "install-nfs-tools: libnfs-utils present ($(command -v nfs-cp))"
	exit 0
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "install-nfs-tools: not root and no passwordless sudo: cannot install libnfs-utils" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq libnfs-utils
command -v nfs-cp >/dev/null
echo "install-nfs-tools: installed $(command -v nfs-cp)"
