#!/usr/bin/env bash
# Installs everything the test bed needs, idempotently, on a bare Debian 12
# with Go: Debian packages, containerd/shim/ctr, crictl, critest (cached in
# $TESTBED/bin) and the test images (OCI layouts in $TESTBED/images).
# Quiet unless something fails; prints one summary line.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS
did=()

command -v go >/dev/null || die "go is not installed (expected in PATH or /usr/local/go/bin)"
mkdir -p "$BIN" "$CACHE"

# --- Debian packages ---------------------------------------------------------
# runc, CNI plugins (bridge, host-local, portmap, loopback in /usr/lib/cni),
# iptables for portmap, iproute2 (ip, ss), util-linux (unshare, nsenter,
# ipcmk for critest), dpkg (dpkg-deb, for the busybox package).
packages=(runc containernetworking-plugins iptables iproute2 util-linux dpkg)
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
for f in "$CNI_BIN_DIR"/{bridge,host-local,portmap,loopback}; do
	[ -x "$f" ] || die "$f is missing (containernetworking-plugins)"
done

# The dynamically linked busybox (see TESTBED.md: busybox-static runs its
# applets inside the shell, which breaks the MaskedPaths spec).
busybox_deb=$(compgen -G "$CACHE/busybox_*.deb" | sort | tail -n 1 || true)
if [ -z "$busybox_deb" ]; then
	if ! (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root busybox) >/tmp/crimux-testbed-apt.log 2>&1; then
		apt_update
		(cd "$CACHE" && quiet apt-download apt-get download -q -o APT::Sandbox::User=root busybox)
	fi
	busybox_deb=$(compgen -G "$CACHE/busybox_*.deb" | sort | tail -n 1) || die "busybox download failed"
	did+=("busybox package")
fi

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

# --- Images ------------------------------------------------------------------
# Rebuilt when their inputs change: test/images sources, Go, busybox, libc.
stamp=$( (
	cd "$REPO_ROOT"
	find test/images -type f -name '*.go' | LC_ALL=C sort | xargs sha256sum
	go version
	sha256sum "$busybox_deb" | cut -d' ' -f1
	dpkg-query -W -f='${Version}\n' libc6
) | sha256sum | cut -d' ' -f1)
if [ ! -s "$IMAGES/images.txt" ] || [ "$(cat "$TESTBED/images.stamp" 2>/dev/null)" != "$stamp" ]; then
	(cd "$REPO_ROOT" && quiet build-images go run ./test/images -out "$IMAGES" -busybox-deb "$busybox_deb")
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
echo "install: $what; containerd $CONTAINERD_VERSION, crictl+critest $CRITOOLS_VERSION, $nimages image tags in $IMAGES ($((SECONDS - start))s)"
