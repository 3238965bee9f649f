#!/usr/bin/env bash
# make bench-one-island: Archipelago's one-island measure on a real
# workload through the FUSE mount of a fresh `atoll dev` cluster (5
# storage servers, 3 islands, 3-way replicated): of every namespace
# operation the workload made, how many needed more than one island.
#
# The workload, each phase under `strace -f -c` (which counts the
# namespace system calls it made: the denominator):
#   untar  tar x of the Go toolchain's source tree (BENCH_ISLANDS_TREE,
#          a path under $GOROOT, default src: all of it)
#   build  go build of this repository's atoll from a copy on the mount,
#          its build cache on the mount too (dependencies from the local
#          module cache)
#   git    git init, add and commit of src/net, then git status twice
#   rm     rm -rf of everything
# The islands count every client request by how many islands its work
# involved (atoll_meta_op_islands_total{islands}: the island asked plus
# every other it called, e.g. a mkdir whose directory hashes elsewhere,
# a rename between directories of two islands); the kernel's caches
# answer many system calls without any request. Needs root, /dev/fuse,
# strace and go.
set -euo pipefail
atoll=$(realpath "${ATOLL:-./bin/atoll}")
repo=$(realpath "$(dirname "$0")/..")
tree=${BENCH_ISLANDS_TREE:-src}
port=${BENCH_ISLANDS_PORT:-28500} # manager; storage +100, islands +200, metrics +300
command -v strace >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq strace >/dev/null; } ||
	{ echo "bench-one-island: strace is needed" >&2; exit 1; }
tmp=$(mktemp -d /tmp/atoll-bench-islands.XXXXXX)
. "$(dirname "$0")/atoll-dev.sh"
cleanup() {
	stop_atoll_dev "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT
goroot=$(go env GOROOT)
tar -C "$goroot" -cf "$tmp/tree.tar" "$tree"
git -C "$repo" archive --format=tar HEAD >"$tmp/atoll.tar"
start_atoll_dev bench-one-island "$atoll" "$tmp" "$port" --metrics-listen "127.0.0.1:$((port + 300))"
mnt=$tmp/data/mnt

# islands: total client requests by islands involved ("1 2 3 4+").
islands() {
	for p in $(seq $((port + 300)) $((port + 315))); do
		curl -s "127.0.0.1:$p/metrics" 2>/dev/null | grep '^atoll_meta_op_islands_total' || true
	done | sed 's/.*islands="\([0-9+]*\)".*} / \1 /' |
		awk '{s[$1] += $2} END {printf "%d %d %d %d\n", s["1"], s["2"], s["3"], s["4+"]}'
}
# The namespace system calls: every call naming a path (strace's %file
# class: open, stat, mkdir, rename, unlink, ...), directory listings and
# the calls changing an open file's attributes or making it durable.
calls=%file,getdents64,fchmod,fchown,ftruncate,fsync,fdatasync,fgetxattr,fsetxattr,flistxattr,fremovexattr,futimesat
traced() { # traced NAME CMD...: runs CMD under strace, prints its namespace calls
	local name=$1
	shift
	strace -f -c -o "$tmp/$name.strace" -e trace="$calls" "$@" >/dev/null
	awk '$NF == "total" {print $4}' "$tmp/$name.strace"
}

phase_untar() { traced untar tar -C "$mnt" -xf "$tmp/tree.tar"; }
phase_build() {
	mkdir -p "$mnt/atoll" "$mnt/gocache"
	tar -C "$mnt/atoll" -xf "$tmp/atoll.tar"
	(cd "$mnt/atoll" && GOCACHE="$mnt/gocache" GOFLAGS=-mod=mod traced build go build -o "$mnt/atoll.bin" ./cmd/atoll)
}
phase_git() {
	local dir=$mnt/$tree/net
	[ -d "$dir" ] || dir=$mnt/$tree
	(cd "$dir" && traced git sh -c 'git init -q && git add -A && git -c user.name=b -c user.email=b@localhost commit -qm tree && git status --short && git status --short')
}
phase_rm() { traced rm rm -rf "$mnt/$tree" "$mnt/atoll" "$mnt/gocache" "$mnt/atoll.bin"; }

printf "%-6s %9s %9s %8s %8s %8s %8s %10s %12s\n" phase syscalls requests "1 isl" "2 isl" "3 isl" "4+ isl" "one-isl %" "multi/1k ops"
tot_calls=0
declare -a tot=(0 0 0 0)
for p in untar build git rm; do
	read -r b1 b2 b3 b4 <<<"$(islands)"
	start=$(date +%s.%N)
	n=$(phase_$p)
	secs=$(echo "$(date +%s.%N) - $start" | bc)
	read -r a1 a2 a3 a4 <<<"$(islands)"
	d=($((a1 - b1)) $((a2 - b2)) $((a3 - b3)) $((a4 - b4)))
	req=$((d[0] + d[1] + d[2] + d[3]))
	multi=$((d[1] + d[2] + d[3]))
	printf "%-6s %9d %9d %8d %8d %8d %8d %10.3f %12.2f   (%.1f s)\n" "$p" "$n" "$req" "${d[0]}" "${d[1]}" "${d[2]}" "${d[3]}" \
		"$(echo "100 * ${d[0]} / ($req + ($req == 0))" | bc -l)" "$(echo "1000 * $multi / ($n + ($n == 0))" | bc -l)" "$secs"
	tot_calls=$((tot_calls + n))
	for k in 0 1 2 3; do tot[k]=$((tot[k] + d[k])); done
done
req=$((tot[0] + tot[1] + tot[2] + tot[3]))
multi=$((tot[1] + tot[2] + tot[3]))
printf "%-6s %9d %9d %8d %8d %8d %8d %10.3f %12.2f\n" all "$tot_calls" "$req" "${tot[0]}" "${tot[1]}" "${tot[2]}" "${tot[3]}" \
	"$(echo "100 * ${tot[0]} / $req" | bc -l)" "$(echo "1000 * $multi / $tot_calls" | bc -l)"
echo "of the workload's $tot_calls namespace system calls, $multi ($(echo "100 * $multi / $tot_calls" | bc -l | cut -c1-6)%) needed more than one island;"
echo "one-island share of operations: $(echo "100 - 100 * $multi / $tot_calls" | bc -l | cut -c1-6)% (Archipelago reports 99.8% on its traces)"
