# crimux — one CRI endpoint for containers and VMs.
#
#   make run     run crimux on this machine (starts the test bed containerd if none runs)
#   make test    everything CI runs: vet, gofmt, unit tests (-race), e2e, a real kubelet, chaos, critest,
#                and the cgroup v2 / systemd node (a VM: test/node); ends with a time table
#   make check   before a commit: vet, gofmt, unit tests, the VM runtime's e2e smoke
#   make install install crimux on a node (DESTDIR, PREFIX, SYSCONFDIR, UNITDIR)
#   make dist    the release tarball, dist/crimux-VERSION-linux-amd64.tar.gz (docs/node.md)
#
# The test bed (test/bed) installs and starts containerd, runc, CNI, crictl,
# critest and a loopback image registry; see test/bed/README.md.

GO        ?= go
TESTBED   ?= /opt/crimux-testbed
RUNDIR    ?= /run/crimux-testbed
BIN       := $(CURDIR)/bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/crimux/crimux/internal/version.Version=$(VERSION)
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v -e /test/e2e -e '/test/bench$$')
# Packages whose tests include integration tests against the test bed
# (internal/testbed): they skip under `make unit` and run under `make e2e`.
INTEG_PKGS = ./runtimes/libvirt/placer/ ./runtimes/libvirt/virt/ ./runtimes/libvirt/podnet/ ./runtimes/libvirt/vmimage/ ./runtimes/libvirt/qcow2/
# make install: what make dist ships, through its install.sh: binaries in
# $(PREFIX)/bin, the qemu wrapper in $(PREFIX)/lib/crimux, the unit,
# kubelet's drop-in, the RuntimeClass manifest, the node agent's RBAC and
# admission policy, and a default config unless one exists.
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DESTDIR    ?=
E2E_ENV   := CRIMUX_E2E=1 CRIMUX_BIN=$(BIN)/crimux CRIMUX_CTL=$(BIN)/crimuxctl CRIMUX_TESTBED=$(TESTBED)
# BED_INSTANCE=b: a suite on the bed's second containerd and pod network
# (test/bed/lib.sh) and a control plane of its own (test/cluster/lib.sh),
# as test/all.sh's second host lane runs e2e-cluster and e2e-kubelet;
# make bed then starts that containerd too.
BED_INSTANCE ?=
export BED_INSTANCE
ifneq ($(BED_INSTANCE),)
export CLUSTER_INSTANCE := $(BED_INSTANCE)
endif

.PHONY: all build install dist dist-tree host-tools e2e-node e2e-kubelet e2e-cluster run test vet fmt-check unit bed bed-down e2e e2e-guest e2e-guest-instant e2e-vm e2e-vm-net e2e-vm-api e2e-vm-storage e2e-vm-durable e2e-faults e2e-migrate chaos critest proto clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crimux ./cmd/crimux
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crimuxctl ./cmd/crimuxctl
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-crimux ./cmd/kubectl-crimux
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crimux-controller ./cmd/crimux-controller
	CGO_ENABLED=0 $(GO) build -o $(BIN)/crimux-qemu-wrapper ./cmd/crimux-qemu-wrapper

install: dist-tree
	DESTDIR=$(DESTDIR) PREFIX=$(PREFIX) SYSCONFDIR=$(SYSCONFDIR) UNITDIR=$(UNITDIR) $(DIST)/crimux-$(VERSION)-linux-amd64/install.sh

# dist: the release tarball, dist/crimux-VERSION-linux-amd64.tar.gz (and
# its .sha256): static binaries, the unit, kubelet's drop-in, the
# manifests, install.sh and SHA256SUMS (hack/dist.sh). A node installs
# from it alone: tar xzf ...; sudo ./crimux-*/install.sh.
DIST ?= $(CURDIR)/dist
dist: dist-tree
dist-tree:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/static/crimux ./cmd/crimux
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/static/crimuxctl ./cmd/crimuxctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/static/kubectl-crimux ./cmd/kubectl-crimux
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/static/crimux-controller ./cmd/crimux-controller
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/static/crimux-qemu-wrapper ./cmd/crimux-qemu-wrapper
	./hack/dist.sh $(DIST) $(VERSION) $(BIN)/static

# host-tools: systemd-analyze, for the e2e test that verifies the unit.
# Debian's systemd package installs it without systemd running.
host-tools:
	@command -v systemd-analyze >/dev/null || { \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends systemd >/dev/null; }

# run: crimux on the default config at /run/crimux/crimux.sock, in front of
# the containerd at /run/containerd/containerd.sock or, if none answers
# there, the test bed's own containerd, and of the libvirtd at
# qemu:///system or the test bed's (both installed and started here: see
# hack/run.sh). Flags for crimux in RUN_FLAGS, e.g.
# make run RUN_FLAGS='--vm-accel tcg'.
RUN_FLAGS ?=
run: build
	./hack/run.sh $(RUN_FLAGS)

# test: every suite below, the bed's builds in the background from the
# start, and a time table at the end (test/all.sh; each suite's log in
# CRIMUX_TEST_LOGS).
test:
	GO=$(GO) TESTBED=$(TESTBED) ./test/all.sh

# check: the loop before a commit: vet, gofmt, the unit tests and the VM
# runtime's e2e smoke (e2e-vm).
.PHONY: check
check: vet fmt-check unit e2e-vm

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

bed:
	TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/install.sh
	TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/up.sh
	$(if $(BED_INSTANCE),TESTBED=$(TESTBED) ./test/bed/up.sh)
	TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/libvirt-up.sh

# bed-node2: a second libvirtd on this machine, for live migration tests:
# node two runs in its own mount and network namespaces,
# reached from the host at qemu+tls://10.231.0.2/system with
# ?pkipath=/etc/crimux-testbed/pki/node1 (test/bed/node2-up.sh; commands
# in it: test/bed/node2-exec.sh). make bed-down stops it.
.PHONY: bed-node2
bed-node2: bed
	TESTBED=$(TESTBED) ./test/bed/node2-up.sh

bed-down:
	-TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/node2-down.sh
	-TESTBED=$(TESTBED) CLUSTER_INSTANCE= ./test/cluster/down.sh
	-TESTBED=$(TESTBED) CLUSTER_INSTANCE=node ./test/cluster/down.sh
	-TESTBED=$(TESTBED) CLUSTER_INSTANCE=b ./test/cluster/down.sh
	-TESTBED=$(TESTBED) BED_INSTANCE=b ./test/bed/down.sh
	-TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/libvirt-down.sh
	TESTBED=$(TESTBED) BED_INSTANCE= ./test/bed/down.sh

# e2e: the tests that kill or restart the bed's daemons, or compare what
# the whole host holds, run first, one at a time; then the rest, each
# with its own crimux, pods and cgroup parent, E2E_PARALLEL at a time
# (their VMs mostly wait on TCG guests; CRIMUX_E2E_SERIAL=1 runs them
# one by one).
E2E_PARALLEL ?= 3
e2e: build bed host-tools
	$(E2E_ENV) $(GO) test -race -count=1 -timeout 10m $(INTEG_PKGS)
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 40m -parallel $(E2E_PARALLEL) ./test/e2e/

# e2e-vm: the VM runtime's e2e tests alone (real libvirtd + qemu, TCG).
e2e-vm: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run '^(TestVMPodLifecycle|TestVMBadInput|TestContainerAndVMSideBySide|TestHostileNeighbour|TestDiskGrowthIsTheWritableLayer|TestVMDoesNotFitItsPod|TestVMUserDataHostile|TestVMStopSignalKill)$$' ./test/e2e/

# e2e-guest: the usable guest (test/guest: Debian 12 from debootstrap,
# cloud-init, qemu-guest-agent, sshd) as a VM pod through crimux with
# crictl, booted once: cloud-init data, exec, port-forward + ssh, attach,
# log reopen, events, graceful stop. Minutes under TCG.
e2e-guest: build bed
	CRIMUX_GUEST=1 $(E2E_ENV) $(GO) test -race -count=1 -v -timeout 25m -run '^TestVMGuest$$' ./test/e2e/

# e2e-guest-instant: the Debian guest's template made once, two VM pods
# restored from it, each a machine of its own.
e2e-guest-instant: build bed
	CRIMUX_GUEST=1 $(E2E_ENV) $(GO) test -race -count=1 -v -timeout 30m -run '^TestVMGuestInstant(Bounded)?$$' ./test/e2e/

# e2e-migrate: live migration between node one (the host's
# libvirtd) and node two of the test bed (test/bed/node2-up.sh: its own
# libvirtd in namespaces of its own, TLS between the two): a VM pod moved
# with crimuxctl vm migrate, its memory, disk and processes intact; and
# the bed's cluster (test/cluster, as e2e-cluster) with a kubelet on each
# node (test/e2e/cluster_node2_test.go). Node two and the cluster are
# taken down afterwards, whatever the tests gave.
e2e-migrate: build bed
	k8s=$$(TESTBED=$(TESTBED) ./test/k8s/build.sh) && \
	{ TESTBED=$(TESTBED) ./test/cluster/up.sh && TESTBED=$(TESTBED) ./test/bed/node2-up.sh && \
	  CRIMUX_MIGRATE=1 CRIMUX_K8S=$$k8s $(E2E_ENV) $(GO) test -race -count=1 -v -timeout 25m -run '^TestVMMigrate' ./test/e2e/; \
	  rc=$$?; TESTBED=$(TESTBED) ./test/bed/node2-down.sh; TESTBED=$(TESTBED) ./test/cluster/down.sh; exit $$rc; }

# e2e-vm-storage: a VM pod's storage through crimux with crictl:
# a loop device as a virtio-blk disk, host directories as virtio-fs shares
# (virtiofsd in the pod's cgroup, read-only where the mount is), the root
# disk kept across a container restart, the image cache collected. `make e2e`
# (so `make test`) runs these too, with every other e2e test.
e2e-vm-storage: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run '^(TestVMStorage|TestVMImageCacheCollected)$$' ./test/e2e/

# e2e-vm-durable: durable VMs through crimux with crictl: a
# block device and a directory as the root disk (imported on first use,
# booted as it is by the next pod, its snapshots listed and restored), and
# the bad volumes refused. `make e2e` (so `make test`) runs these too.
e2e-vm-durable: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run '^(TestVMDurableRootDisk|TestVMDurableBadInput|TestVMDurableVolumeLinkRace)$$' ./test/e2e/

# e2e-faults: what a node does to crimux in a bad week: the
# state dir's filesystem filled under a running VM and new pods; the store
# cut short under a running VM pod and rebuilt by crimuxctl store rebuild;
# libvirtd killed during a burst of 20 VM pods, containerd during a pull
# and during a burst of container pods, virtlogd while a guest writes its
# console. `make e2e` (so `make test`) runs these too.
e2e-faults: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run '^(TestFullStateDisk|TestDamagedStoreRebuilt|TestLibvirtdKilledDuringVMBurst|TestContainerdKilledDuringPull|TestContainerdKilledDuringPodBurst|TestVirtlogdKilledWhileGuestWrites)$$' ./test/e2e/

# e2e-vm-net: VM pod networking alone (CNI, DHCP in the guest, container
# <-> VM, 20 create/delete cycles without leaks, CNI 1.1 GC of leaked
# addresses and STATUS as the VM runtime's network readiness, the
# bandwidth annotations shaping a VM pod's traffic, dual stack and
# IPv6-only VM pods), against the bed's network.
e2e-vm-net: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run '^(TestVMNetwork|TestVMNetworkDelRetried|TestVMAndContainerReachEachOther|TestVMNetworkCycles|TestVMNetworkGC|TestVMNetworkStatus|TestVMNetworkBandwidth|TestVMDualStack|TestVMIPv6Only)$$' ./test/e2e/

# e2e-node: crimux on the node people run: a Debian 12 VM
# booted under qemu TCG (test/node: systemd as init, cgroup v2, containerd
# with SystemdCgroup = true, libvirt and qemu from Debian, crimux installed
# from make dist's tarball by its install.sh and run by its unit): TestNode
# with crictl (pod slices, limits, stats, update, crimux killed, reloaded,
# stopped, frozen and upgraded through its unit), then kubelet as a systemd
# unit joined to the bed's cluster and the cluster's VM scenarios
# (TestNodeKubelet, a power cut of the node among them), then the whole of critest in the node
# (docs/testing.md, "The cgroup v2 node"). The node disk is cached by its
# inputs (test/node/build.sh). Prints last:
# node: cgroup v2, systemd driver, kubelet: N passed, M failed, K skipped
e2e-node: build
	TESTBED=$(TESTBED) ./test/bed/install.sh
	TESTBED=$(TESTBED) GO=$(GO) ./test/node/e2e.sh

# chaos: 200 cycles of mixed container and VM pods while crimux is
# SIGKILLed at random and restarted; prints the leak counts from the host.
chaos: build bed
	CRIMUX_CHAOS=1 $(E2E_ENV) $(GO) test -count=1 -v -timeout 30m -run '^TestChaos$$' ./test/e2e/

# soak: an hour of churn, not part of make test: VM and
# container pods made and removed, execs, snapshots and power changes,
# crimux SIGKILLed every 3-5 minutes; crimux's RSS, goroutines, open fds,
# store size and libvirt connections sampled each minute may not grow more
# than 5 % after the first 10 minutes, and nothing may leak. SOAK=5m for a
# short run (raise SOAK_TIMEOUT with a longer one). Prints SOAK lines and
# writes docs/bench/soak-$(SOAK).md (to paste into docs/benchmarks.md) and
# docs/bench/soak-$(SOAK).svg.
SOAK         ?= 60m
SOAK_TIMEOUT ?= 100m
.PHONY: soak
soak: build bed
	CRIMUX_SOAK=$(SOAK) CRIMUX_SOAK_OUT=$(CURDIR)/docs/bench/soak-$(SOAK) $(E2E_ENV) $(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' ./test/e2e/

# e2e-vm-api: the VM API's e2e tests alone (reboot, snapshots, power
# state, bad input), driven with bin/crimuxctl against real libvirtd + qemu.
e2e-vm-api: build bed
	$(E2E_ENV) $(GO) test -race -count=1 -v -timeout 15m -run 'VMAPI' ./test/e2e/

# bench: what crimux costs over the direct path (containerd's socket,
# libvirt directly), each figure measured both ways in one run, alternating:
# both paths on a containerd of the run's own (the bed's binary and config),
# killed with its pods at the end.
# prints `BENCH <name> <value> <unit>` lines and rewrites the table in
# docs/benchmarks.md. Figures never fail the run. The VMs use a copy of the
# qemu wrapper with a placement socket of the bench's own, so crimux daemons
# of tests running alongside cannot take it over. Fewer rounds while
# developing: make bench BENCH_FLAGS='-rpc-calls 200 -burst 5 ...'
BENCH_FLAGS ?=
BENCH_PLACEMENT := /run/crimux-bench/placement.sock
.PHONY: bench
bench: build bed
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.placementSocket=$(BENCH_PLACEMENT)" \
		-o $(BIN)/crimux-qemu-wrapper-bench ./cmd/crimux-qemu-wrapper
	$(GO) build -o $(BIN)/crimux-bench ./test/bench
	$(BIN)/crimux-bench -crimux $(BIN)/crimux -wrapper $(BIN)/crimux-qemu-wrapper-bench \
		-containerd unix://$(RUNDIR)/containerd/containerd.sock -containerd-bin $(TESTBED)/bin/containerd \
		-out docs/benchmarks.md $(BENCH_FLAGS)

# proto: regenerate the VM API's Go code (committed; CI does not run this).
# protoc from Debian's protobuf-compiler, the Go plugins from the test bed.
proto:
	PATH=$(TESTBED)/bin:$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		vm/v1/vm.proto

# e2e-kubelet: an unmodified kubelet (test/k8s: kubelet, kube-apiserver,
# kubectl and etcd built once per version into $(TESTBED)/k8s, ~12 min on 2
# cores) runs standalone against crimux with a container and a VM static
# pod (test/e2e/kubelet_test.go).
e2e-kubelet: build bed
	kubelet=$$(TESTBED=$(TESTBED) ./test/k8s/build.sh kubelet) && \
	$(E2E_ENV) CRIMUX_KUBELET=$$kubelet $(GO) test -race -count=1 -v -timeout 20m -run 'Kubelet' ./test/e2e/

# e2e-cluster: a one-node cluster (test/cluster: etcd and kube-apiserver on
# loopback, certificates made locally, RuntimeClass vm applied) whose
# kubelet runs on crimux; kubectl drives VM and container pods
# (test/e2e/cluster_test.go). The control plane is stopped afterwards,
# whatever the tests gave.
e2e-cluster: build bed
	k8s=$$(TESTBED=$(TESTBED) ./test/k8s/build.sh) && \
	TESTBED=$(TESTBED) ./test/cluster/up.sh && \
	{ $(E2E_ENV) CRIMUX_K8S=$$k8s $(GO) test -race -count=1 -v -timeout 30m -run 'Cluster' ./test/e2e/; \
	  rc=$$?; TESTBED=$(TESTBED) ./test/cluster/down.sh; exit $$rc; }

# critest: the CRI validation suite twice in one run, against containerd
# directly and through crimux in front of the same containerd, each with 4
# specs at once (critest --parallel; CRITEST_PARALLEL=1 runs them serially);
# the last two lines printed are the two summaries.
critest: build bed
	TESTBED=$(TESTBED) ./test/bed/critest-both.sh $(BIN)/crimux

clean:
	rm -rf $(BIN) $(DIST)
