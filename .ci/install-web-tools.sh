#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's end-to-end test
# (TestDashboard in test/dashboard_test.go drives the manager's page in
# headless Chromium; with $CI set it fails instead of skipping when
# Chromium is missing). Idempotent: does nothing when chromium is there.
# Needs root (or passwordless sudo) and Debian's package archive; exits
# non-zero when it cannot install.
set -euo pipefail
for c in chromium chromium-browser; do
	if command -v "$c" >/dev/null; then
		echo "install-web-tools: $c present ($(command -v "$c"))"
		exit 0
	fi
done
sudo=()
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "install-web-tools: not root and no passwordless sudo: cannot install chromium" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq chromium
command -v chromium >/dev/null
echo "install-web-tools: installed $(command -v chromium)"
