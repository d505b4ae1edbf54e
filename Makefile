# crimux — one CRI endpoint for containers and VMs.
#
#   make run     run crimux on this machine (starts the test bed containerd if none runs)
#   make test    everything CI runs: vet, gofmt, unit tests (-race), e2e, critest
#
# The test bed (test/bed) installs and starts containerd, runc, CNI, crictl,
# critest and a loopback image registry; see test/bed/README.md.

GO        ?= go
TESTBED   ?= /opt/crimux-testbed
RUNDIR    ?= /run/crimux-testbed
BIN       := $(CURDIR)/bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/crimux/crimux/internal/version.Version=$(VERSION)
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v /test/)
E2E_ENV   := CRIMUX_E2E=1 CRIMUX_BIN=$(BIN)/crimux CRIMUX_TESTBED=$(TESTBED)

.PHONY: all build run test vet fmt-check unit bed bed-down e2e e2e-vm critest clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crimux ./cmd/crimux
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crimuxctl ./cmd/crimuxctl
	CGO_ENABLED=0 $(GO) build -o $(BIN)/crimux-qemu-wrapper ./cmd/crimux-qemu-wrapper

# run: crimux on the default config at /run/crimux/crimux.sock, in front of
# the containerd at /run/containerd/containerd.sock or, if none answers
# there, the test bed's own containerd (installed and started here).
run: build
	./hack/run.sh

test: vet fmt-check unit e2e critest

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

bed:
	TESTBED=$(TESTBED) ./test/bed/install.sh
	TESTBED=$(TESTBED) ./test/bed/up.sh
	TESTBED=$(TESTBED) ./test/bed/libvirt-up.sh

bed-down:
	-TESTBED=$(TESTBED) ./test/bed/libvirt-down.sh
	TESTBED=$(TESTBED) ./test/bed/down.sh

e2e: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 20m ./test/e2e/

# e2e-vm: the VM runtime's e2e tests alone (real libvirtd + qemu, TCG).
e2e-vm: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run 'VM' ./test/e2e/

# critest: the CRI validation suite twice in one run, against containerd
# directly and through crimux in front of the same containerd; the last two
# lines printed are the two summaries.
critest: build bed
	TESTBED=$(TESTBED) ./test/bed/critest-both.sh $(BIN)/crimux

clean:
	rm -rf $(BIN)
