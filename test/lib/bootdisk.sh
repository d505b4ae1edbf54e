# shellcheck shell=bash
# Helpers to make a bootable Debian disk from a root directory without
# mounting it (sourced): the approach of test/guest/build.sh (ext4 from
# `mke2fs -d`, an MBR partition table, GRUB's boot.img in the MBR and its
# core.img in the gap behind it), as functions. test/guest/build.sh keeps
# its own copy so that its cache key does not move; test/node uses these.

# chroot_mounts ROOT DEBS: mounts what apt and maintainer scripts need in
# ROOT (proc, sys, dev, devpts) and DEBS as apt's archive cache; stops
# services from starting (policy-rc.d). chroot_unmounts undoes it.
chroot_mounts() {
	local root=$1 debs=$2
	mount -t proc proc "$root/proc"
	mount -t sysfs sys "$root/sys"
	mount --bind /dev "$root/dev"
	mount --bind /dev/pts "$root/dev/pts"
	mount --bind "$debs" "$root/var/cache/apt/archives"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
}

chroot_unmounts() {
	local root=$1 m
	rm -f "$root/usr/sbin/policy-rc.d"
	for m in "$root/var/cache/apt/archives" "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc"; do
		if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
	done
}

# bootdisk_kernel ROOT: the newest kernel's version suffix in ROOT/boot
# (e.g. 6.1.0-41-cloud-amd64).
bootdisk_kernel() {
	local k
	k=$(cd "$1/boot" && ls vmlinuz-* | sort -V | tail -n 1)
	echo "${k#vmlinuz-}"
}

# bootdisk_make ROOT LABEL SIZE_GIB GRUB_CFG WORK OUT_QCOW2: writes
# ROOT/boot/grub (modules and GRUB_CFG, with @KERNEL@, @INITRD@ and
# @LABEL@ replaced), then a raw disk of SIZE_GIB GiB with ROOT as its one
# ext4 partition (label LABEL) at 1 MiB, GRUB in the MBR and the gap, and
# converts it to OUT_QCOW2. WORK holds the intermediate files.
bootdisk_make() {
	local root=$1 label=$2 size=$3 cfg=$4 work=$5 out=$6
	local grubdir=/usr/lib/grub/i386-pc release
	release=$(bootdisk_kernel "$root")
	[ -s "$root/boot/initrd.img-$release" ] || { echo "no initramfs for $release" >&2; return 1; }
	mkdir -p "$root/boot/grub/i386-pc"
	cp "$grubdir"/*.mod "$grubdir"/*.lst "$root/boot/grub/i386-pc/"
	sed -e "s/@KERNEL@/vmlinuz-$release/" -e "s/@INITRD@/initrd.img-$release/" -e "s/@LABEL@/$label/" \
		"$cfg" >"$root/boot/grub/grub.cfg"
	mkfs.ext4 -q -L "$label" -d "$root" "$work/root.ext4" "$((size * 1024 - 1))M"
	grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
		biosdisk part_msdos ext2 normal linux configfile search serial terminal echo test boot
	[ "$(stat -c %s "$work/core.img")" -lt $((1024 * 1024 - 512)) ] || { echo "core.img too large" >&2; return 1; }
	truncate -s "${size}G" "$work/disk.raw"
	echo 'start=2048, type=83, bootable' | sfdisk -q "$work/disk.raw"
	dd if="$work/root.ext4" of="$work/disk.raw" bs=1M seek=1 conv=sparse,notrunc status=none
	dd if="$grubdir/boot.img" of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
	dd if="$work/core.img" of="$work/disk.raw" bs=512 seek=1 conv=notrunc status=none
	rm -f "$work/root.ext4"
	qemu-img convert -O qcow2 "$work/disk.raw" "$out.new"
	rm -f "$work/disk.raw"
	mv -f "$out.new" "$out"
}
