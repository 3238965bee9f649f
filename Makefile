# Atoll. `make test` is what CI runs (see .ci/run); benchmarks and soaks
# have their own targets and are not part of it.
GO ?= go
PKGS := ./...

.PHONY: all build test vet fmt-check race unit fuzz bench-data bench-data-json bench-meta clean

all: build

build:
	$(GO) build -o bin/atoll ./cmd/atoll

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# Unit and integration tests with the race detector. Integration tests
# build bin/atoll-test themselves and start real servers on 127.0.0.1.
test: fmt-check vet
	$(GO) test -race -timeout 20m $(PKGS)

# Short fuzzing of the decoders that face the network.
fuzz:
	$(GO) test -run XXX -fuzz FuzzReadFrameHeader -fuzztime 30s ./internal/wire/
	$(GO) test -run XXX -fuzz FuzzDec -fuzztime 30s ./internal/wire/
	$(GO) test -run XXX -fuzz FuzzStorageRequests -fuzztime 30s ./internal/storage/

# The data-path benchmark of issue #2: 5 storage servers, ec:4+1, 1 GiB.
bench-data: build
	./bin/atoll bench data --servers 5 --policy ec:4+1 --size 1GiB

bench-data-json: build
	./bin/atoll bench data --servers 5 --policy ec:4+1 --size 1GiB --json

# The metadata benchmark of issue #3 on 1 and 3 islands.
bench-meta: build
	./bin/atoll bench meta --islands 1
	./bin/atoll bench meta --islands 3

clean:
	rm -rf bin
