#!/usr/bin/env bash
# make xfstests: xfstests (https://github.com/kdave/xfstests, the suite the
# kernel's file systems and CephFS run) on Atoll FUSE mounts, as its
# README.fuse describes: FSTYP=fuse, a mount helper mount.fuse.atoll, and
# two dev clusters, one behind TEST_DEV and one behind SCRATCH_DEV.
# xfstests is cloned and built under $XFSTESTS_WORK, never committed.
#
#   XFSTESTS_WORK   work directory (default /var/tmp/atoll-xfstests)
#   XFSTESTS_REPO   where to clone xfstests from (default its GitHub URL)
#   XFSTESTS_TESTS  what ./check runs (default "-g quick")
#   XFSTESTS_EXCLUDE an exclude file (default scripts/xfstests.exclude)
#
# The results are xfstests' own: $XFSTESTS_WORK/xfstests/results/check.log
# and the summary it prints (Passed all / Failures: / Not run:).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${XFSTESTS_WORK:-/var/tmp/atoll-xfstests}
repo=${XFSTESTS_REPO:-https://github.com/kdave/xfstests}
tests=${XFSTESTS_TESTS:-"-g quick"}
exclude=${XFSTESTS_EXCLUDE:-$root/scripts/xfstests.exclude}
[ "$(id -u)" = 0 ] || { echo "xfstests: run as root (mounts, users, /sbin helper)" >&2; exit 1; }

# What xfstests needs to build and run (Debian package names).
pkgs=(xfsprogs xfslibs-dev uuid-dev uuid-runtime libtool-bin automake autoconf make gcc libacl1-dev libattr1-dev
	libaio-dev libgdbm-dev libcap-dev libssl-dev gawk bc attr acl psmisc quota fio dbench file xfsdump)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	echo "xfstests: apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || {
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	}
fi
for u in fsgqa fsgqa2; do getent passwd $u >/dev/null || useradd -m $u; done
getent group fsgqa >/dev/null || groupadd fsgqa
getent passwd 123456-fsgqa >/dev/null || useradd -m 123456-fsgqa 2>/dev/null || true

mkdir -p "$work"
if [ ! -x "$work/xfstests/check" ]; then
	rm -rf "$work/xfstests"
	git clone -q "$repo" "$work/xfstests"
fi
if [ ! -x "$work/xfstests/ltp/fsx" ]; then
	echo "xfstests: building (a few minutes)"
	make -s -C "$work/xfstests" -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
fi

go build -o "$work/atoll" ./cmd/atoll

# Two clusters: TEST_DEV's and SCRATCH_DEV's (xfstests "mkfs"es the
# scratch device by emptying its file system).
pids=()
cleanup() {
	for m in "$work/mnt/test" "$work/mnt/scratch"; do umount -l "$m" 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
start_cluster() { # name base-port: the first base whose ports are free
	local name=$1 base=$2
	for _ in 1 2 3 4 5 6 7 8; do
		if port_free $base && port_free $((base + 1)) && port_free $((base + 100)) && port_free $((base + 102)) && port_free $((base + 200)) && port_free $((base + 201)); then
			break
		fi
		base=$((base + 2000))
	done
	eval "${name}_cluster=127.0.0.1:$base"
	rm -rf "$work/$name"
	mkdir -p "$work/$name"
	"$work/atoll" dev --data "$work/$name/data" --no-mount --storage 3 --islands 2 --island-replicas 1 --nfs-listen "" --web-listen "" --metrics-listen "" \
		--manager-listen 127.0.0.1:$base --storage-listen 127.0.0.1:$((base + 100)) --island-listen 127.0.0.1:$((base + 200)) \
		>"$work/$name/dev.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 600); do grep -q "atoll dev ready" "$work/$name/dev.log" 2>/dev/null && return 0; sleep 0.1; done
	echo "xfstests: cluster $name did not start:" >&2
	tail -20 "$work/$name/dev.log" >&2
	exit 1
}
start_cluster test 37300
start_cluster scratch 38300

# The mount helper: mount -t fuse.atoll DEV DIR [-o opts] mounts the
# cluster DEV names and returns once mounted (atoll mount serves in the
# background until unmounted).
cat >/sbin/mount.fuse.atoll <<HELPER
#!/bin/bash
dev=\$1 mnt=\$2
case "\$dev" in
atoll-test) cl=$test_cluster key=$work/test/data/admin.key ;;
atoll-scratch) cl=$scratch_cluster key=$work/scratch/data/admin.key ;;
*) echo "mount.fuse.atoll: unknown device \$dev" >&2; exit 1 ;;
esac
# Of the options, atoll takes the access time ones and ro (which it
# refuses: a test that needs a read-only mount fails visibly).
opts=
if [ "\$3" = -o ]; then
	for o in \$(echo "\$4" | tr , ' '); do
		case "\$o" in noatime|relatime|strictatime|atime|ro) opts=\$opts,\$o ;; esac
	done
fi
# Ready once atoll says so (the mount shows a moment before, when an
# umount would still be EBUSY).
ready=\$(mktemp -u /tmp/atoll-mount-ready.XXXXXX)
setsid $work/atoll mount --cluster \$cl --key \$key --fsname "\$dev" --plain-type --log-level warn -o "\${opts#,}" --ready-file "\$ready" "\$mnt" >>$work/mount.log 2>&1 </dev/null &
pid=\$!
for _ in \$(seq 300); do
	[ -e "\$ready" ] && { rm -f "\$ready"; exit 0; }
	kill -0 \$pid 2>/dev/null || break # it refused (see mount.log)
	sleep 0.1
done
echo "mount.fuse.atoll: \$mnt not mounted" >&2
exit 1
HELPER
chmod +x /sbin/mount.fuse.atoll

mkdir -p "$work/mnt/test" "$work/mnt/scratch"
cat >"$work/xfstests/local.config" <<CONF
export TEST_DEV=atoll-test
export TEST_DIR=$work/mnt/test
export SCRATCH_DEV=atoll-scratch
export SCRATCH_MNT=$work/mnt/scratch
export FSTYP=fuse
export FUSE_SUBTYP=.atoll
CONF
cd "$work/xfstests"
ex=()
[ -f "$exclude" ] && ex=(-E "$exclude")
# shellcheck disable=SC2086
./check "${ex[@]}" $tests
