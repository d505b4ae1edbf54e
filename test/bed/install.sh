#!/usr/bin/env bash
# Installs everything the test bed needs, idempotently, on a bare Debian 12
# with Go: Debian packages, containerd/shim/ctr, crictl, critest and the
# ginkgo CLI that runs it in parallel (cached in $TESTBED/bin) and the test
# images (OCI layouts in $TESTBED/images).
# Quiet unless something fails; prints one summary line. With --packages,
# only the Debian packages.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS
did=()

command -v go >/dev/null || die "go is not installed (expected in PATH or /usr/local/go/bin)"
mkdir -p "$BIN" "$CACHE"

# --- Debian packages ---------------------------------------------------------
# runc, iptables for portmap (the CNI plugins are built below), iproute2 (ip, ss), util-linux (unshare, nsenter,
# ipcmk for critest), dpkg (dpkg-deb, for the busybox package); for the VM
# images: Debian's cloud kernel and its modules, e2fsprogs (mkfs.ext4,
# debugfs), qemu-utils (qemu-img), xz-utils (xz-compressed modules);
# openssh-client (ssh, ssh-keygen) for the guest e2e's ssh through
# port-forward; openssl and socat for node two (node2-up.sh), installed
# here so that no suite runs apt beside another (test/all.sh).
packages=(runc iptables iproute2 util-linux dpkg
	linux-image-cloud-amd64 e2fsprogs qemu-utils xz-utils openssh-client
	openssl socat)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
apt_updated=false
apt_update() {
	$apt_updated && return 0
	quiet apt-update apt-get update
	apt_updated=true
}
if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
	apt_update
fi
if [ ${#missing[@]} -gt 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/crimux-testbed-apt.log 2>&1; then
		apt_update
		quiet apt-install apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
	did+=("apt: ${missing[*]}")
fi
# --packages: the Debian packages alone (a minute), so that the unit tests
# (qemu-img) can start while the rest is built (test/all.sh).
if [ "${1:-}" = --packages ]; then
	echo "install: packages ${did[*]:-present} ($((SECONDS - start))s)"
	exit 0
fi
# cached_deb VAR PACKAGE: sets VAR to the path of PACKAGE's .deb in
# $CACHE, downloading it (not installing it) first if needed.
cached_deb() {
	local deb
	deb=$(compgen -G "$CACHE/${2}_*.deb" | sort -V | tail -n 1 || true)
	if [ -z "$deb" ]; then
		if ! (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$2") >/tmp/crimux-testbed-apt.log 2>&1; then
			apt_update
			(cd "$CACHE" && quiet apt-download apt-get download -q -o APT::Sandbox::User=root "$2")
		fi
		deb=$(compgen -G "$CACHE/${2}_*.deb" | sort -V | tail -n 1) || die "$2 download failed"
		did+=("$2 package")
	fi
	printf -v "$1" '%s' "$deb"
}

# The dynamically linked busybox (see TESTBED.md: busybox-static runs its
# applets inside the shell, which breaks the MaskedPaths spec) for the
# container images; busybox-static for the VM images' initramfs. Only
# downloaded: the two packages conflict, and the host needs neither.
busybox_deb='' busybox_static_deb=''
cached_deb busybox_deb busybox
cached_deb busybox_static_deb busybox-static
# Debian's qemu-guest-agent for crimux/vm-busybox-agent's initramfs (with
# the libraries it links, taken from this host: qemu-utils brings them).
qemu_ga_deb=''
cached_deb qemu_ga_deb qemu-guest-agent

# The VM images' kernel: the newest installed Debian cloud kernel, with its
# modules (virtio, ACPI button, evdev) for the initramfs.
vm_kernel=$(compgen -G '/boot/vmlinuz-*-cloud-amd64' | sort -V | tail -n 1 || true)
[ -n "$vm_kernel" ] || die "no /boot/vmlinuz-*-cloud-amd64 (linux-image-cloud-amd64)"
vm_release=${vm_kernel#/boot/vmlinuz-}
[ -s "/lib/modules/$vm_release/modules.dep" ] || die "/lib/modules/$vm_release/modules.dep is missing"

# --- Go-built binaries -------------------------------------------------------
# built_ok BINARY MODULE VERSION: BINARY was built from MODULE@VERSION, statically
# (CGO_ENABLED=0, as this script builds it).
built_ok() {
	[ -x "$1" ] || return 1
	go version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '
		$1 == "mod" && $2 == m && $3 == v { mod = 1 }
		$1 == "build" && $2 == "CGO_ENABLED=0" { static = 1 }
		END { exit !(mod && static) }'
}

need_ctd=false
for b in containerd containerd-shim-runc-v2 ctr; do
	built_ok "$BIN/$b" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" || need_ctd=true
done
if $need_ctd; then
	quiet go-install-containerd env GOBIN="$BIN" CGO_ENABLED=0 go install \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
	did+=("containerd $CONTAINERD_VERSION")
fi

# The CNI plugins (CNI 1.1) into $CNI_BIN_DIR, as containerd is built.
need_cni=()
for p in "${CNI_PLUGINS[@]}"; do
	built_ok "$CNI_BIN_DIR/${p##*/}" "$CNI_PLUGINS_MODULE" "$CNI_PLUGINS_VERSION" ||
		need_cni+=("$CNI_PLUGINS_MODULE/plugins/$p@$CNI_PLUGINS_VERSION")
done
if [ ${#need_cni[@]} -gt 0 ]; then
	mkdir -p "$CNI_BIN_DIR"
	quiet go-install-cni env GOBIN="$CNI_BIN_DIR" CGO_ENABLED=0 go install "${need_cni[@]}"
	did+=("CNI plugins $CNI_PLUGINS_VERSION")
fi

if ! built_ok "$BIN/crictl" sigs.k8s.io/cri-tools "$CRITOOLS_VERSION"; then
	quiet go-install-crictl env GOBIN="$BIN" CGO_ENABLED=0 go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRITOOLS_VERSION"
	did+=("crictl $CRITOOLS_VERSION")
fi

# critest is a test binary: built with `go test -c` from a writable copy of
# the cri-tools module.
if [ ! -x "$BIN/critest" ] || [ "$(cat "$BIN/critest.version" 2>/dev/null)" != "$CRITOOLS_VERSION" ]; then
	modjson=$(GOFLAGS='' GOWORK=off go mod download -json "sigs.k8s.io/cri-tools@$CRITOOLS_VERSION" 2>&1) ||
		die "go mod download sigs.k8s.io/cri-tools@$CRITOOLS_VERSION failed: $modjson"
	moddir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$modjson")
	[ -d "$moddir" ] || die "cannot find the cri-tools $CRITOOLS_VERSION module directory"
	src=$CACHE/src/cri-tools@$CRITOOLS_VERSION
	rm -rf "$src"
	mkdir -p "$(dirname "$src")"
	cp -r "$moddir" "$src"
	chmod -R u+w "$src"
	(cd "$src" && quiet critest-build env CGO_ENABLED=0 GOFLAGS='' GOWORK=off go test -c -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRITOOLS_VERSION#v}" -o "$BIN/critest" ./cmd/critest)
	echo "$CRITOOLS_VERSION" >"$BIN/critest.version"
	did+=("critest $CRITOOLS_VERSION")
fi

# The ginkgo CLI, which `critest --parallel=N` runs (from PATH: the critest
# scripts put $BIN first in it; test/node/critest.sh copies it next to
# critest in the node), at the ginkgo/v2 version cri-tools' go.mod requires
# (the CLI and the library in critest must agree). ginkgo.version records
# "GINKGO_VERSION for cri-tools CRITOOLS_VERSION".
if [ ! -x "$BIN/ginkgo" ] || [[ "$(cat "$BIN/ginkgo.version" 2>/dev/null)" != *" for cri-tools $CRITOOLS_VERSION" ]]; then
	modjson=$(GOFLAGS='' GOWORK=off go mod download -json "sigs.k8s.io/cri-tools@$CRITOOLS_VERSION" 2>&1) ||
		die "go mod download sigs.k8s.io/cri-tools@$CRITOOLS_VERSION failed: $modjson"
	gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$modjson")
	[ -s "$gomod" ] || die "cannot find the cri-tools $CRITOOLS_VERSION go.mod"
	ginkgo_version=$(awk '$1 == "github.com/onsi/ginkgo/v2" && $2 ~ /^v/ { print $2; exit }' "$gomod")
	[ -n "$ginkgo_version" ] || die "cri-tools $CRITOOLS_VERSION's go.mod requires no github.com/onsi/ginkgo/v2"
	quiet go-install-ginkgo env GOBIN="$BIN" CGO_ENABLED=0 GOFLAGS='' GOWORK=off go install \
		"github.com/onsi/ginkgo/v2/ginkgo@$ginkgo_version"
	echo "$ginkgo_version for cri-tools $CRITOOLS_VERSION" >"$BIN/ginkgo.version"
	did+=("ginkgo $ginkgo_version")
fi

# --- Images ------------------------------------------------------------------
# Rebuilt when their inputs change: test/images sources, Go, busybox, libc;
# for the VM images the kernel and its modules, busybox-static, e2fsprogs
# and qemu-utils. The VM images' kernel, initramfs and disk layers are
# also cached by their inputs in $CACHE/vm-layers (the test/images builder
# keeps them), so a rebuild for another reason reuses them as they are.
# The usable guest (crimux/vm-debian): Debian 12 made by debootstrap,
# cached by its inputs in $CACHE/guest (test/guest/build.sh; 75 s of the
# 500 s a first `make run` took on a fresh machine).
guest_disk=$(TESTBED=$TESTBED "$REPO_ROOT/test/guest/build.sh" | tail -n 1)
[ -s "$guest_disk" ] || die "test/guest/build.sh gave no disk"
stamp=$( (
	cd "$REPO_ROOT"
	echo "$guest_disk"
	find test/images -type f -name '*.go' | LC_ALL=C sort | xargs sha256sum
	go version
	sha256sum "$busybox_deb" "$busybox_static_deb" "$qemu_ga_deb" "$vm_kernel" "/lib/modules/$vm_release/modules.dep" | cut -d' ' -f1
	echo "$vm_kernel"
	dpkg-query -W -f='${Package} ${Version}\n' libc6 libglib2.0-0 e2fsprogs qemu-utils "linux-image-$vm_release" 2>/dev/null || true
) | sha256sum | cut -d' ' -f1)
if [ ! -s "$IMAGES/images.txt" ] || [ "$(cat "$TESTBED/images.stamp" 2>/dev/null)" != "$stamp" ]; then
	(cd "$REPO_ROOT" && quiet build-images go run ./test/images -out "$IMAGES" -busybox-deb "$busybox_deb" \
		-busybox-static-deb "$busybox_static_deb" -qemu-ga-deb "$qemu_ga_deb" -vm-kernel "$vm_kernel" -vm-modules "/lib/modules/$vm_release" \
		-vm-cache "$CACHE/vm-layers" -guest-disk "$guest_disk")
	echo "$stamp" >"$TESTBED/images.stamp"
	did+=("images")
fi
nimages=$(grep -vc '^#' "$IMAGES/images.txt")

if [ ${#did[@]} -eq 0 ]; then
	what="nothing to do"
else
	what=$(printf ', %s' "${did[@]}")
	what="installed ${what#, }"
fi
echo "install: $what; containerd $CONTAINERD_VERSION, CNI plugins $CNI_PLUGINS_VERSION, crictl+critest $CRITOOLS_VERSION, $nimages image tags in $IMAGES ($((SECONDS - start))s)"
