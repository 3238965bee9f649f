#!/usr/bin/env bash
# Runs an external file system suite on an Atoll FUSE mount of a fresh
# local cluster (`atoll dev`, 5 storage servers, 3 islands, in a temporary
# directory), then unmounts and stops the cluster.
#
#   fs-suite.sh pjdfstest [PATTERN...]   POSIX conformance (pjdfstest, Rust)
#   fs-suite.sh fsx                      data integrity (fsx, FSX_OPS ops)
#
# Environment: ATOLL (the binary, default bin/atoll), ATOLL_SUITE_PORT (first
# port, default 27300, below the ephemeral port range; +100 storage, +200 islands), FSX_OPS (default
# 100000), FSX_SEED, PJDFSTEST_BASELINE=1 (also run pjdfstest on a local
# directory for comparison), KEEP=1 (keep the temporary directory).
# The tools come from `make setup` (.ci/setup.sh). Must run as root (pjdfstest
# switches users; the mount uses allow_other).
set -euo pipefail

suite=${1:?usage: fs-suite.sh pjdfstest|fsx [args]}
shift
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
atoll=${ATOLL:-$repo/bin/atoll}
port=${ATOLL_SUITE_PORT:-27300}
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"

for tool in "$suite"; do
	command -v "$tool" >/dev/null || { echo "fs-suite: $tool not found: run make setup" >&2; exit 2; }
done
[ -x "$atoll" ] || { echo "fs-suite: $atoll not built (make build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "fs-suite: must run as root" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/atoll-$suite.XXXXXX")
chmod 0755 "$tmp" # pjdfstest switches to unprivileged users: they must reach the mount
mnt=$tmp/mnt
mkdir -p "$mnt"
devpid= mountpid=
cleanup() {
	rc=$?
	cd /
	if [ -n "$mountpid" ] && kill -0 "$mountpid" 2>/dev/null; then
		kill -TERM "$mountpid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$mountpid" 2>/dev/null || break; sleep 0.1; done
	fi
	if grep -qs " $mnt " /proc/self/mountinfo; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
	if [ -n "$devpid" ] && kill -0 "$devpid" 2>/dev/null; then
		kill -TERM "$devpid" 2>/dev/null || true
		wait "$devpid" 2>/dev/null || true
	fi
	if [ "$rc" != 0 ]; then
		echo "--- mount log (tail)"; tail -n 30 "$tmp/mount.log" 2>/dev/null || true
		echo "--- dev log (tail)"; tail -n 30 "$tmp/dev.log" 2>/dev/null || true
	fi
	if [ "${KEEP:-}" = 1 ]; then echo "fs-suite: kept $tmp"; else rm -rf "$tmp"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$atoll" dev --data "$tmp/data" --islands 3 --storage 5 --log-level warn --no-mount --nfs-listen "" --web-listen "" --metrics-listen "" \
	--manager-listen "127.0.0.1:$port" --storage-listen "127.0.0.1:$((port + 100))" \
	--island-listen "127.0.0.1:$((port + 200))" >"$tmp/dev.log" 2>&1 &
devpid=$!
for i in $(seq 900); do
	grep -q "atoll dev ready" "$tmp/dev.log" && break
	kill -0 "$devpid" 2>/dev/null || { echo "fs-suite: atoll dev exited" >&2; exit 1; }
	[ "$i" = 900 ] && { echo "fs-suite: cluster not ready after 90s" >&2; exit 1; }
	sleep 0.1
done

"$atoll" mount --cluster "127.0.0.1:$port" --key "$tmp/data/admin.key" --log-level warn ${ATOLL_MOUNT_ARGS:-} "$mnt" >"$tmp/mount.log" 2>&1 &
mountpid=$!
for i in $(seq 300); do
	grep -qs " $mnt " /proc/self/mountinfo && break
	kill -0 "$mountpid" 2>/dev/null || { echo "fs-suite: atoll mount exited" >&2; exit 1; }
	[ "$i" = 300 ] && { echo "fs-suite: not mounted after 30s" >&2; exit 1; }
	sleep 0.1
done
echo "fs-suite: cluster 127.0.0.1:$port mounted on $mnt"

case "$suite" in
pjdfstest)
	conf=$here/pjdfstest.toml
	run_pjd() { # dir label
		mkdir -p "$1"
		chmod 0755 "$1"
		(cd "$1" && pjdfstest -c "$conf" -p "$1" "${@:3}") >"$tmp/pjd-$2.log" 2>&1 || true
		grep -E "FAILED$" "$tmp/pjd-$2.log" | sed "s/^/  $2: /" || true
		local sum
		sum=$(grep -E "^Summary:" "$tmp/pjd-$2.log" || echo "Summary: (none: pjdfstest did not finish)")
		echo "pjdfstest $2: $sum"
	}
	if [ "${PJDFSTEST_BASELINE:-}" = 1 ]; then
		run_pjd "$tmp/local" local "$@"
	fi
	run_pjd "$mnt/pjdfstest" atoll "$@"
	cp "$tmp/pjd-atoll.log" "${PJDFSTEST_LOG:-/tmp/pjdfstest-atoll.log}" 2>/dev/null || true
	# The closing line in the form CI reads: "N passed, N failed, N skipped".
	read -r failed skipped passed < <(sed -nE 's/^Summary: ([0-9]+) failed, ([0-9]+) skipped, ([0-9]+) passed.*/\1 \2 \3/p' "$tmp/pjd-atoll.log")
	echo "pjdfstest: ${passed:-0} passed, ${failed:-1} failed, ${skipped:-0} skipped"
	[ "${failed:-1}" = 0 ]
	;;
fsx)
	ops=${FSX_OPS:-100000}
	seed=()
	[ -n "${FSX_SEED:-}" ] && seed=(-S "$FSX_SEED")
	mkdir -p "$tmp/fsx-artifacts"
	if fsx -f "$here/fsx.toml" -N "$ops" "${seed[@]}" -P "$tmp/fsx-artifacts" "$mnt/fsx.data" >"$tmp/fsx.log" 2>&1; then
		tail -n 3 "$tmp/fsx.log"
		echo "fsx: 1 passed, 0 failed ($ops operations, no miscompare)"
	else
		tail -n 60 "$tmp/fsx.log"
		echo "fsx: 0 passed, 1 failed"
		exit 1
	fi
	;;
*)
	echo "fs-suite: unknown suite $suite" >&2
	exit 2
	;;
esac
