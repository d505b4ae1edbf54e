#!/usr/bin/env bash
# Stops what test/bed/libvirt-up.sh started: destroys and undefines the
# libvirt domains named crimux-* (no other), then stops the libvirtd and
# virtlogd this script's sibling started (by their recorded pids). Packages,
# qemu.conf and the installed wrapper stay. Idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

LIBVIRT_URI=qemu:///system
LIBVIRTD=/usr/sbin/libvirtd
VIRTLOGD=/usr/sbin/virtlogd
LIBVIRTD_OURS=$RUN_DIR/libvirtd.started
VIRTLOGD_OURS=$RUN_DIR/virtlogd.started

virsh_() { timeout 30 virsh -q -c "$LIBVIRT_URI" "$@"; }

if timeout 10 virsh -c "$LIBVIRT_URI" version >/dev/null 2>&1; then
	n=0
	while IFS= read -r dom; do
		[[ $dom == crimux-* ]] || continue
		virsh_ destroy "$dom" >/dev/null 2>&1 || true
		# Managed-save images and snapshot metadata would block undefine.
		virsh_ undefine "$dom" --managed-save --snapshots-metadata --nvram >/dev/null 2>&1 ||
			virsh_ undefine "$dom" >/dev/null 2>&1 || warn "could not undefine $dom"
		n=$((n + 1))
	done < <(virsh_ list --all --name)
	[ "$n" = 0 ] || echo "$SCRIPT: removed $n crimux-* domain(s)"
fi

# stop_ours NAME EXE OURSFILE: stops the daemon if the recorded pid still
# runs EXE.
stop_ours() {
	local name=$1 exe=$2 ours=$3 pid
	[ -s "$ours" ] || return 0
	if pid=$(pid_running "$ours" "$exe"); then
		stop_pid "$pid" "$name" 30
		echo "$SCRIPT: stopped $name (pid $pid)"
	fi
	rm -f "$ours"
}
stop_ours libvirtd "$LIBVIRTD" "$LIBVIRTD_OURS"
stop_ours virtlogd "$VIRTLOGD" "$VIRTLOGD_OURS"
