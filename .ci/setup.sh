#!/usr/bin/env bash
# Everything the test suite needs beyond Go, installed when missing:
#   - libnfs-utils (nfs-cp, nfs-ls, nfs-cat): NFS gateway tests, the README tour
#   - jq: the README tour
#   - chromium: the dashboard's end-to-end test
#   - fuse3 (fusermount3), pjdfstest and fsx (crates.io), user `tests`: FUSE suites
#   - iproute2 and nftables: simulated hosts (network namespaces, partitions)
#   - sqlite3 and util-linux's flock: lock tests across mounts
#   - python3: a reader that maps files (its SIGBUS must not hit the mount's process)
# `make test` runs this first; `make setup` runs it alone. Idempotent: a
# machine that has everything installs nothing. Run by a user who cannot
# install (not root, no passwordless sudo) with something missing, it
# lists what is missing, names the one command that installs it and fails,
# so that no suite is silently skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"

missing_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have nfs-cp && have nfs-ls && have nfs-cat || missing_apt+=(libnfs-utils)
have jq || missing_apt+=(jq)
have chromium || have chromium-browser || missing_apt+=(chromium)
have fusermount3 || missing_apt+=(fuse3)
have ip || missing_apt+=(iproute2)
have nft || missing_apt+=(nftables)
have sqlite3 || missing_apt+=(sqlite3)
have flock || missing_apt+=(util-linux)
have python3 || missing_apt+=(python3)
# The SMB gateway: Samba's smbd and pdbedit, nss_wrapper, smbclient and
# smbtorture (samba-testsuite) for its tests.
have smbd && have pdbedit || missing_apt+=(samba)
have smbclient || missing_apt+=(smbclient)
have smbtorture || missing_apt+=(samba-testsuite)
[ -e /usr/lib/x86_64-linux-gnu/libnss_wrapper.so ] || [ -e /usr/lib/aarch64-linux-gnu/libnss_wrapper.so ] || missing_apt+=(libnss-wrapper)
missing_crates=()
have pjdfstest || missing_crates+=(pjdfstest)
have fsx || missing_crates+=(fsx)
have cargo || [ ${#missing_crates[@]} -eq 0 ] || missing_apt+=(cargo)
missing_users=()
getent passwd tests >/dev/null || missing_users+=(tests)

missing_pip=()
python3 -c 'import smbprotocol' 2>/dev/null || missing_pip+=(smbprotocol)

if [ ${#missing_apt[@]} -eq 0 ] && [ ${#missing_crates[@]} -eq 0 ] && [ ${#missing_users[@]} -eq 0 ] && [ ${#missing_pip[@]} -eq 0 ]; then
	echo "setup: everything the suite needs is installed"
	exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
	if have sudo && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		echo "setup: missing: ${missing_apt[*]} ${missing_crates[*]} ${missing_pip[*]} ${missing_users[*]/#/user }" >&2
		echo "setup: this user cannot install them; run once as root:  sudo make setup" >&2
		exit 1
	fi
fi

if [ ${#missing_apt[@]} -gt 0 ]; then
	echo "setup: apt-get install ${missing_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq "${missing_apt[@]}"
fi
for crate in "${missing_crates[@]}"; do
	echo "setup: cargo install $crate"
	cargo install --locked "$crate" || cargo install "$crate"
done
# pjdfstest switches to the user/group `tests` and to nobody/nogroup.
getent group tests >/dev/null || "${sudo[@]}" groupadd tests
getent passwd tests >/dev/null || "${sudo[@]}" useradd -M -g tests tests
getent passwd nobody >/dev/null || "${sudo[@]}" useradd -M nobody
getent group nogroup >/dev/null || getent group nobody >/dev/null || "${sudo[@]}" groupadd nogroup

# smbprotocol (PyPI): the SMB2 client the SMB lock tests drive.
if ! python3 -c 'import smbprotocol' 2>/dev/null; then
	echo "setup: pip install smbprotocol"
	python3 -m pip install -q smbprotocol 2>/dev/null ||
		python3 -m pip install -q --break-system-packages smbprotocol ||
		{ "${sudo[@]}" apt-get install -y -qq python3-pip && python3 -m pip install -q --break-system-packages smbprotocol; }
fi
python3 -c 'import smbprotocol' || { echo "setup: python3 cannot import smbprotocol after installing" >&2; exit 1; }

for t in nfs-cp jq fusermount3 pjdfstest fsx ip nft sqlite3 flock smbd pdbedit smbclient smbtorture; do
	have "$t" || { echo "setup: $t still missing after installing" >&2; exit 1; }
done
have chromium || have chromium-browser || { echo "setup: chromium still missing after installing" >&2; exit 1; }
echo "setup: done"
