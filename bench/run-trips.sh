#!/usr/bin/env bash
# make bench-trips: island requests per file of a real `tar x` through the
# FUSE mount of a fresh `atoll dev` cluster (5 storage servers, ec:4+1, 3
# islands), by operation, counted from the islands' /metrics
# (atoll_meta_ops_total) before and after. The tree is a directory of the
# Go toolchain's source (BENCH_TRIPS_TREE, default net/http: about 115
# files in 14 directories). Needs root and /dev/fuse.
set -euo pipefail
atoll=$(realpath "${ATOLL:-./bin/atoll}")
tree=${BENCH_TRIPS_TREE:-net/http}
port=${BENCH_TRIPS_PORT:-28300} # manager; storage +100, islands +200, metrics +300
tmp=$(mktemp -d /tmp/atoll-bench-trips.XXXXXX)
. "$(dirname "$0")/atoll-dev.sh"
cleanup() {
	stop_atoll_dev "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT
tar -C "$(go env GOROOT)/src" -cf "$tmp/tree.tar" "$tree"
start_atoll_dev bench-trips "$atoll" "$tmp" "$port" --metrics-listen "127.0.0.1:$((port + 300))" ${BENCH_TRIPS_ATOLL_ARGS:-}
# Every role's /metrics is on the metrics ports; the islands' carry
# atoll_meta_ops_total{op=...}.
scrape() {
	for p in $(seq $((port + 300)) $((port + 315))); do
		curl -s "127.0.0.1:$p/metrics" 2>/dev/null | grep '^atoll_meta_ops_total' || true
	done | sed 's/{.*op="\([a-z_]*\)".*} / \1 /' | awk '{s[$2] += $3} END {for (k in s) print k, s[k]}' | sort
}
files=$(tar tf "$tmp/tree.tar" | grep -vc '/$')
dirs=$(tar tf "$tmp/tree.tar" | grep -c '/$')
scrape >"$tmp/before"
start=$(date +%s.%N)
tar -C "$tmp/data/mnt" -xf "$tmp/tree.tar"
sync
end=$(date +%s.%N)
scrape >"$tmp/after"
diff -r "$(go env GOROOT)/src/$tree" "$tmp/data/mnt/$tree" >/dev/null || { echo "bench-trips: the unpacked tree differs" >&2; exit 1; }
echo "tar x of $tree through the mount: $files files, $dirs directories, $(echo "$end - $start" | bc) s (tar x + sync)"
join -a2 "$tmp/before" "$tmp/after" | awk -v n="$files" '
	{ b = (NF == 3) ? $2 : 0; a = (NF == 3) ? $3 : $2; d = a - b
	  if (d > 0) { t += d; printf "  %-10s %7d  %5.2f per file\n", $1, d, d / n } }
	END { printf "  %-10s %7d  %5.2f per file\n", "total", t, t / n }'
