#!/usr/bin/env bash
# make bench-fs: `atoll bench fs` on a FUSE mount of a fresh `atoll dev`
# cluster (5 storage servers, ec:4+1, 3 islands) and on a local directory
# of the same disk, in one run, then the ratios. Needs root and /dev/fuse.
set -euo pipefail
atoll=${ATOLL:-./bin/atoll}
size=${BENCH_FS_SIZE:-1GiB}
files=${BENCH_FS_FILES:-10000}
port=${ATOLL_BENCH_PORT:-29300} # below the ephemeral port range
tmp=$(mktemp -d /tmp/atoll-bench-fs.XXXXXX)
. "$(dirname "$0")/atoll-dev.sh"
cleanup() {
	stop_atoll_dev "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT
start_atoll_dev bench-fs "$atoll" "$tmp" "$port"
mkdir -p "$tmp/local"
echo "== atoll (FUSE mount, ec:4+1 over 5 storage servers)"
"$atoll" bench fs --dir "$tmp/data/mnt" --size "$size" --small-files "$files" --json >"$tmp/atoll.json"
echo "== local directory, same disk"
"$atoll" bench fs --dir "$tmp/local" --size "$size" --small-files "$files" --json >"$tmp/local.json"
python3 - "$tmp/atoll.json" "$tmp/local.json" <<'PY'
import json, sys
a, l = (json.load(open(p)) for p in sys.argv[1:3])
print(json.dumps({"atoll": a, "local": l}))
for k in ("seq_write_mbps", "cold_read_mbps", "second_read_mbps", "small_files_per_s", "small_files_parallel_per_s", "small_files_fsync_per_s", "stat_cold_per_s", "stat_warm_per_s"):
    print(f"{k:20s} atoll {a[k]:12.1f}   local {l[k]:12.1f}   ratio {a[k] / l[k]:.2f}")
PY
