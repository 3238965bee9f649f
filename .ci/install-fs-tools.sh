#!/usr/bin/env bash
# Installs what the FUSE suites need (`make pjdfstest`, `make fsx`, and the
# FUSE tests in test/fuse_test.go): fuse3 (fusermount3), pjdfstest and fsx
# (Rust, from crates.io), and the user/group `tests` that pjdfstest switches
# to. Idempotent: each step runs only if its result is missing. Run as root.
set -euo pipefail
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"

if ! command -v fusermount3 >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq fuse3
fi
if ! command -v cargo >/dev/null; then
	echo "install-fs-tools: cargo not found (install Rust) for pjdfstest and fsx" >&2
	exit 1
fi
for crate in pjdfstest fsx; do
	if ! command -v "$crate" >/dev/null; then
		cargo install --locked "$crate" || cargo install "$crate"
	fi
done
getent group tests >/dev/null || groupadd tests
getent passwd tests >/dev/null || useradd -M -g tests tests
# pjdfstest's other dummy user: nobody with group nogroup (Debian) or nobody.
getent passwd nobody >/dev/null || useradd -M nobody
getent group nogroup >/dev/null || getent group nobody >/dev/null || groupadd nogroup
echo "install-fs-tools: fusermount3 $(command -v fusermount3), pjdfstest $(command -v pjdfstest), fsx $(command -v fsx), user tests ok"
