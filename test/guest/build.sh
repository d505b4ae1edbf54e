#!/usr/bin/env bash
# Builds the test bed's usable guest: Debian 12 (bookworm) with systemd,
# cloud-init (NoCloud), qemu-guest-agent, openssh-server and the cloud
# kernel, made with debootstrap (no image is downloaded), booting from its
# own disk with GRUB: a qcow2 at $TESTBED/cache/guest/<key>/disk.qcow2.
#
# Built once per key (this script and its files, the host's debootstrap,
# grub and qemu-img): about 5 minutes, so it is cached; the test images
# (test/images -guest-disk) package it as crimux/vm-debian, a containerDisk
# with /disk/disk.qcow2 alone. Prints the disk's path as its last line.
#
# MIRROR (default http://deb.debian.org/debian) is where debootstrap takes
# its packages.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTBED=${TESTBED:-/opt/crimux-testbed}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
SIZE=3G
export PATH=$PATH:/usr/sbin:/sbin DEBIAN_FRONTEND=noninteractive

need() {
	local missing=()
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}
need debootstrap grub-pc-bin grub-common qemu-utils e2fsprogs fdisk

key=$( (
	cd "$here" && find . -type f | LC_ALL=C sort | xargs sha256sum
	echo "$SUITE $SIZE"
	dpkg-query -W -f='${Package} ${Version}\n' debootstrap grub-pc-bin qemu-utils e2fsprogs
) | sha256sum | cut -c1-16)
out=$TESTBED/cache/guest/$key
if [ -s "$out/disk.qcow2" ]; then
	echo "$out/disk.qcow2"
	exit 0
fi

start=$SECONDS
work=$(mktemp -d /var/tmp/crimux-guest.XXXXXX)
root=$work/root
cleanup() {
	set +e
	for m in "$root/var/cache/apt/archives" "$root/proc" "$root/sys" "$root/dev/pts" "$root/dev"; do
		mountpoint -q "$m" && umount -l "$m"
	done
	if [ "${KEEP:-}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
log=$work/build.log
fail() {
	echo "guest/build.sh: $1 failed; last lines of the log:" >&2
	tail -n 30 "$log" >&2
	exit 1
}

# 1. The root file system: a minimal Debian, then the guest's packages
# with apt inside it (debootstrap's own --include resolves too little).
# Downloaded packages stay in $debs for the next build.
debs=$TESTBED/cache/guest-debs
mkdir -p "$debs/partial"
# A mirror that drops a download fails debootstrap: one more try, from the
# packages already fetched.
for try in 1 2; do
	nice -n 10 debootstrap --variant=minbase --cache-dir="$debs" "$SUITE" "$root" "$MIRROR" >"$log" 2>&1 && break
	[ "$try" = 2 ] && fail debootstrap
	rm -rf "$root"
done
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount --bind "$debs" "$root/var/cache/apt/archives"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
echo "deb $MIRROR $SUITE main" >"$root/etc/apt/sources.list"
pkgs=(systemd-sysv udev dbus cloud-init qemu-guest-agent openssh-server linux-image-cloud-amd64
	ifupdown isc-dhcp-client iproute2 netbase sudo e2fsprogs ca-certificates procps)
{
	chroot "$root" apt-get -o Acquire::Retries=3 update -q &&
		chroot "$root" env DEBIAN_FRONTEND=noninteractive nice -n 10 apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends "${pkgs[@]}"
} >>"$log" 2>&1 || fail "apt-get install in the root"
umount "$root/var/cache/apt/archives"
rm -f "$root/usr/sbin/policy-rc.d"
cp -r "$here/files/." "$root/"
chroot "$root" /bin/sh -eu /crimux-setup.sh >>"$log" 2>&1 || fail "the setup in the root"
rm -f "$root/crimux-setup.sh"
for m in "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc"; do umount "$m"; done
kernel=$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -n 1)
initrd=initrd.img-${kernel#vmlinuz-}
[ -s "$root/boot/$initrd" ] || fail "the initramfs ($initrd)"

# 2. The disk, made without mounting anything (no loop partitions, no
# udev needed): the root file system as an ext4 image populated from the
# directory (mke2fs -d), placed at 1 MiB behind an MBR partition table,
# with GRUB's boot.img in the MBR and its core.img (the modules to read
# ext4 on an MBR disk and boot Linux, its prefix built in) in the gap:
# what grub-install does, without the device probing.
raw=$work/disk.raw
part=$work/root.ext4
grubdir=/usr/lib/grub/i386-pc
mkdir -p "$root/boot/grub/i386-pc"
cp "$grubdir"/*.mod "$grubdir"/*.lst "$root/boot/grub/i386-pc/"
sed -e "s/@KERNEL@/$kernel/" -e "s/@INITRD@/$initrd/" "$here/grub.cfg" >"$root/boot/grub/grub.cfg"
mkfs.ext4 -q -L debroot -d "$root" "$part" "$(( ${SIZE%G} * 1024 - 1 ))M" >>"$log" 2>&1 || fail mkfs.ext4
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
	biosdisk part_msdos ext2 normal linux configfile search serial terminal echo test boot >>"$log" 2>&1 ||
	fail grub-mkimage
[ "$(stat -c %s "$work/core.img")" -lt $(( 1024 * 1024 - 512 )) ] || fail "core.img size"
truncate -s "$SIZE" "$raw"
echo 'start=2048, type=83, bootable' | sfdisk -q "$raw" >>"$log" 2>&1 || fail sfdisk
dd if="$part" of="$raw" bs=1M seek=1 conv=sparse,notrunc status=none
dd if="$grubdir/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none

# 3. The qcow2, written next to the cache entry and moved in whole.
mkdir -p "$out"
nice -n 10 qemu-img convert -O qcow2 "$raw" "$out/disk.qcow2.new" >>"$log" 2>&1 || fail qemu-img
mv -f "$out/disk.qcow2.new" "$out/disk.qcow2"
# Older entries of the cache are other keys' disks: keep the newest only.
find "$TESTBED/cache/guest" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "guest/build.sh: built $SUITE guest ($kernel) in $((SECONDS - start))s" >&2
echo "$out/disk.qcow2"
