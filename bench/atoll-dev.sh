# Sourced by the bench scripts that run a workload on the FUSE mount of a
# fresh `atoll dev` cluster (5 storage servers, ec:4+1, 3 islands).
#
# start_atoll_dev NAME ATOLL DIR PORT [dev flags...] starts it with its data
# in DIR/data (the mount at DIR/data/mnt), the manager on PORT, storage
# servers from PORT+100 and islands from PORT+200 (no NFS gateway, no
# dashboard, no metrics unless the flags say), its log in DIR/dev.log;
# it waits for "atoll dev ready" and the mount, and exits the script with
# the log (NAME: what failed) otherwise. It sets atoll_dev_pid.
# stop_atoll_dev DIR stops it and detaches a mount left behind; call it
# from the script's EXIT trap.
start_atoll_dev() {
	local name=$1 atoll=$2 dir=$3 port=$4
	shift 4
	"$atoll" dev --data "$dir/data" --log-level warn --nfs-listen "" --web-listen "" --metrics-listen "" \
		--manager-listen "127.0.0.1:$port" --storage-listen "127.0.0.1:$((port + 100))" \
		--island-listen "127.0.0.1:$((port + 200))" "$@" >"$dir/dev.log" 2>&1 &
	atoll_dev_pid=$!
	for _ in $(seq 600); do
		grep -q "atoll dev ready" "$dir/dev.log" && break
		kill -0 "$atoll_dev_pid" 2>/dev/null || { cat "$dir/dev.log"; echo "$name: atoll dev exited" >&2; exit 1; }
		sleep 0.1
	done
	grep -q "FUSE:" "$dir/dev.log" || { cat "$dir/dev.log"; echo "$name: no FUSE mount" >&2; exit 1; }
}

stop_atoll_dev() {
	[ -n "${atoll_dev_pid:-}" ] && kill "$atoll_dev_pid" 2>/dev/null && wait "$atoll_dev_pid" 2>/dev/null || true
	umount -l "$1/data/mnt" 2>/dev/null || true
}
