#!/usr/bin/env bash
# Builds the crimux test node: a Debian 12 disk that boots (GRUB, the cloud
# kernel) into systemd on the unified cgroup v2 hierarchy, with containerd
# (the test bed's build, SystemdCgroup = true), runc, CNI plugins, libvirt
# and qemu from Debian (libvirt's cgroup handling off), openssh-server,
# crictl, a loopback image registry, and crimux installed from `make dist`'s tarball
# with its unit enabled. Prints the qcow2's path as its last line; the SSH
# key to log in as root is id_ed25519 beside it.
#
# Two cache levels under $TESTBED/cache/node: base-<key>/root, the Debian
# root with its packages (debootstrap + apt: minutes, keyed by the package
# list, the suite and the host's debootstrap), and <key>/disk.qcow2, that
# root plus crimux, containerd and the configs (about a minute, keyed by
# everything that goes in: a new crimux commit makes a new disk, not a new
# base), and the release tarball beside it. Needs root, Debian 12, and the test bed's binaries
# (test/bed/install.sh). MIRROR as in test/guest/build.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib/bootdisk.sh
source "$repo/test/lib/bootdisk.sh"
TESTBED=${TESTBED:-/opt/crimux-testbed}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
SIZE_GIB=10
LABEL=crimuxnode
cache=$TESTBED/cache/node
# One build at a time (test/all.sh builds in the background what a suite
# may ask for): a second caller waits, then finds the cache.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin DEBIAN_FRONTEND=noninteractive GOTOOLCHAIN=${GOTOOLCHAIN:-local}
nice_() { nice -n 19 ionice -c3 "$@"; }

need() {
	local missing=() pkg
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}
need debootstrap grub-pc-bin grub-common qemu-utils e2fsprogs fdisk openssh-client make
for b in containerd containerd-shim-runc-v2 ctr crictl; do
	[ -x "$TESTBED/bin/$b" ] || { echo "node/build.sh: $TESTBED/bin/$b is missing: run test/bed/install.sh" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/crimux-node.XXXXXX)
log=$work/build.log
cleanup() {
	set +e
	[ -d "$work/root" ] && chroot_unmounts "$work/root"
	[ -d "$work/base" ] && chroot_unmounts "$work/base"
	if [ "${KEEP:-}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
	echo "node/build.sh: $1 failed; last lines of $log:" >&2
	tail -n 30 "$log" >&2
	exit 1
}
start=$SECONDS

# --- 1. The base: Debian and the node's packages ------------------------------
mapfile -t pkgs < <(grep -v '^#' "$here/packages" | tr ' ' '\n' | sed '/^$/d')
base_key=$( (
	echo "$SUITE ${pkgs[*]}"
	dpkg-query -W -f='${Package} ${Version}\n' debootstrap
) | sha256sum | cut -c1-16)
base=$cache/base-$base_key
if [ ! -e "$base/done" ]; then
	debs=$cache/debs
	mkdir -p "$debs/partial"
	# The guest's downloads are a good start (read, never written).
	cp -n "$TESTBED"/cache/guest-debs/*.deb "$debs/" 2>/dev/null || true
	root=$work/base
	for try in 1 2; do
		nice_ debootstrap --variant=minbase --cache-dir="$debs" "$SUITE" "$root" "$MIRROR" >"$log" 2>&1 && break
		[ "$try" = 2 ] && fail debootstrap
		rm -rf "$root"
	done
	chroot_mounts "$root" "$debs"
	echo "deb $MIRROR $SUITE main" >"$root/etc/apt/sources.list"
	{
		chroot "$root" apt-get -o Acquire::Retries=3 update -q &&
			chroot "$root" env DEBIAN_FRONTEND=noninteractive nice -n 19 apt-get -o Acquire::Retries=3 \
				install -y -q --no-install-recommends "${pkgs[@]}"
	} >>"$log" 2>&1 || fail "apt-get install in the root"
	chroot_unmounts "$root"
	chroot "$root" apt-get clean
	rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc/"* "$root/usr/share/man/"* "$root/usr/share/info/"*
	find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias -exec rm -rf {} +
	rm -rf "$base.new"
	mkdir -p "$base.new"
	mv "$root" "$base.new/root"
	touch "$base.new/done"
	rm -rf "$base"
	mv "$base.new" "$base"
	find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'base-*' ! -name "base-$base_key" -exec rm -rf {} +
	echo "node/build.sh: built the base ($SUITE, ${#pkgs[@]} packages) in $((SECONDS - start))s" >&2
fi

# --- 2. The node: crimux, containerd, configs ----------------------------------
bins=$work/bin
mkdir -p "$bins"
(cd "$repo" && CGO_ENABLED=0 nice_ go build -trimpath -o "$bins/crimux-test-registry" ./test/registry) >>"$log" 2>&1 ||
	fail "building the test registry"
# crimux comes to the node as it comes to any node: the release tarball of
# make dist, unpacked and installed by its install.sh alone.
(cd "$repo" && nice_ make -s dist DIST="$work/dist") >>"$log" 2>&1 || fail "make dist"
tarball=$(ls "$work"/dist/crimux-*-linux-amd64.tar.gz)
key=$( (
	echo "$base_key $SIZE_GIB $LABEL"
	cd "$repo"
	find test/node/files test/lib systemd -type f | LC_ALL=C sort | xargs sha256sum
	sha256sum test/node/{build.sh,setup.sh,grub.cfg,packages}
	sha256sum Makefile "$tarball" "$bins/crimux-test-registry" \
		"$TESTBED"/bin/{containerd,containerd-shim-runc-v2,ctr,crictl} | cut -d' ' -f1
	dpkg-query -W -f='${Package} ${Version}\n' grub-pc-bin qemu-utils e2fsprogs
) | sha256sum | cut -c1-16)
out=$cache/$key
if [ -s "$out/disk.qcow2" ]; then
	echo "$out/disk.qcow2"
	exit 0
fi
step=$SECONDS
root=$work/root
cp -a "$base/root" "$root"
cp -r "$here/files/." "$root/"
install -m 0755 "$TESTBED"/bin/{containerd,containerd-shim-runc-v2,ctr,crictl} "$bins/crimux-test-registry" "$root/usr/local/bin/"
mkdir -p "$root/var/lib/crimux-node/images"
tar -C "$work/dist" -xzf "$tarball"
DESTDIR="$root" "${tarball%.tar.gz}/install.sh" >>"$log" 2>&1 || fail "install.sh of $(basename "$tarball")"
cp "$here/setup.sh" "$root/crimux-setup.sh"
chroot "$root" /bin/sh -eu /crimux-setup.sh >>"$log" 2>&1 || fail "the setup in the root"
rm -f "$root/crimux-setup.sh"
mkdir -p "$out"
rm -f "$out"/id_ed25519*
# The release the disk was installed from, for the upgrade test (up.sh
# copies it into the node).
cp "$tarball" "$out/crimux-release.tar.gz"
ssh-keygen -q -t ed25519 -N '' -C crimux-node-test -f "$out/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$out/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
nice_ bash -c "$(declare -f bootdisk_make bootdisk_kernel); bootdisk_make \"\$@\"" _ \
	"$root" "$LABEL" "$SIZE_GIB" "$here/grub.cfg" "$work" "$out/disk.qcow2" >>"$log" 2>&1 || fail "the disk"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name 'base-*' ! -name debs -exec rm -rf {} +
echo "node/build.sh: built the node disk in $((SECONDS - step))s (all: $((SECONDS - start))s)" >&2
echo "$out/disk.qcow2"
