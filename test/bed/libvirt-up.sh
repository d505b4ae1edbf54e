#!/usr/bin/env bash
# Starts the VM side of the test bed: installs libvirt and qemu if missing,
# turns off libvirt's own cgroup handling (crimux places qemu itself, see
# runtimes/libvirt/placer), starts virtlogd and libvirtd (no systemd here)
# and installs crimux-qemu-wrapper as /usr/local/lib/crimux/crimux-qemu-wrapper.
# Idempotent: whatever already runs and answers is left alone, except that a
# libvirtd this script started is restarted when qemu.conf changed.
# test/bed/libvirt-down.sh undoes it (packages stay).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS

PACKAGES=(libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils linux-image-cloud-amd64)
QEMU_CONF=/etc/libvirt/qemu.conf
LIBVIRT_URI=qemu:///system
LIBVIRTD=/usr/sbin/libvirtd
VIRTLOGD=/usr/sbin/virtlogd
# The daemons keep their default pid files (so no second instance can start
# next to them); ours record which pids this script started.
LIBVIRTD_SYS_PID=/run/libvirtd.pid
VIRTLOGD_SYS_PID=/run/virtlogd.pid
LIBVIRTD_OURS=$RUN_DIR/libvirtd.started
VIRTLOGD_OURS=$RUN_DIR/virtlogd.started
LIBVIRTD_LOG=$RUN_DIR/libvirtd.log
WRAPPER_DIR=/usr/local/lib/crimux
WRAPPER=$WRAPPER_DIR/crimux-qemu-wrapper
QEMU_BIN=/usr/bin/qemu-system-x86_64

mkdir -p "$RUN_DIR"

# --- packages -------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	echo "$SCRIPT: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# The package lists may be stale or absent on a fresh machine.
	quiet apt-update apt-get update
	quiet apt-install apt-get install -y --no-install-recommends "${missing[@]}"
fi
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || die "no /boot/vmlinuz-*-cloud-amd64 after installing linux-image-cloud-amd64"

# --- qemu.conf: libvirt must not manage qemu's cgroups --------------------------
# Drops every active cgroup_controllers statement (a list may span lines)
# and appends ours. KubeVirt does the same. Global to this libvirtd.
conf_changed=0
want=$(
	awk '
		skipping { if ($0 ~ /\]/) skipping = 0; next }
		/^[ \t]*cgroup_controllers[ \t]*=/ { if ($0 !~ /\]/) skipping = 1; next }
		/^# crimux: libvirt must not manage qemu.s cgroups/ { next }
		/^[ \t]*stdio_handler[ \t]*=/ { next }
		/^# crimux: qemu writes its console log itself/ { next }
		{ print }
	' "$QEMU_CONF"
	echo "# crimux: libvirt must not manage qemu's cgroups (runtimes/libvirt/placer places qemu)"
	echo 'cgroup_controllers = [ ]'
	echo "# crimux: qemu writes its console log itself; through virtlogd a virtlogd restart loses it (docs/node.md)"
	echo 'stdio_handler = "file"'
)
if [ "$want" != "$(cat "$QEMU_CONF")" ]; then
	tmp=$(mktemp "$QEMU_CONF.XXXXXX")
	printf '%s\n' "$want" >"$tmp"
	chmod --reference="$QEMU_CONF" "$tmp"
	chown --reference="$QEMU_CONF" "$tmp"
	[ -e "$QEMU_CONF.crimux-orig" ] || cp -p "$QEMU_CONF" "$QEMU_CONF.crimux-orig"
	mv -f "$tmp" "$QEMU_CONF"
	conf_changed=1
	echo "$SCRIPT: set cgroup_controllers = [ ] in $QEMU_CONF (original kept as $QEMU_CONF.crimux-orig)"
fi

# --- hugetlbfs: libvirt backs huge page RAM from it --------------------------------
# libvirt's qemu driver finds hugetlbfs mounts when libvirtd starts: a VM pod
# with a hugepages-2Mi limit needs one (issue 40). systemd mounts it at
# /dev/hugepages on a systemd node; here nothing does. Mounting it makes a
# running libvirtd of ours restart, like a qemu.conf change.
if ! awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/self/mounts; then
	mkdir -p /dev/hugepages
	mount -t hugetlbfs -o pagesize=2M hugetlbfs /dev/hugepages
	conf_changed=1
	echo "$SCRIPT: mounted hugetlbfs (2 MiB pages) at /dev/hugepages"
fi

# --- the qemu wrapper ------------------------------------------------------------
# Built from this tree; installed only when it changed, or when qemu is newer
# than it: libvirt caches qemu's capabilities keyed by the <emulator>'s
# ctime, so after a qemu upgrade the wrapper must change for libvirt to
# probe again.
build=$(mktemp -d /tmp/crimux-qemu-wrapper.XXXXXX)
trap 'rm -rf "$build"' EXIT
(cd "$REPO_ROOT" && CGO_ENABLED=0 quiet go-build-wrapper go build -trimpath -ldflags "-s -w" \
	-o "$build/crimux-qemu-wrapper" ./cmd/crimux-qemu-wrapper)
install -d -m 0755 -o root -g root "$WRAPPER_DIR"
if ! cmp -s "$build/crimux-qemu-wrapper" "$WRAPPER" || [ "$QEMU_BIN" -nt "$WRAPPER" ]; then
	install -m 0755 -o root -g root "$build/crimux-qemu-wrapper" "$WRAPPER.new"
	mv -f "$WRAPPER.new" "$WRAPPER"
	echo "$SCRIPT: installed $WRAPPER"
fi
# The qemu user must be able to reach it.
if id libvirt-qemu >/dev/null 2>&1; then
	setpriv --reuid=libvirt-qemu --regid=kvm --clear-groups test -x "$WRAPPER" ||
		die "$WRAPPER is not executable by libvirt-qemu (check the modes of its directories)"
fi

# --- /dev/kvm: the group udev would give it -------------------------------------
# Without udev, /dev/kvm keeps the gid the machine was made with, which on a
# fresh test machine can name another group here (seen: ssl-cert, after the
# kvm group was made by our apt-get). libvirt then finds KVM in qemu's probe
# (run as root) but not usable by the qemu user, calls its cached
# capabilities outdated on every lookup and probes qemu again: 6-10 s per
# libvirt call, 100 s per VM CreateContainer. Debian's udev rules make it
# root:kvm 0660; so do we.
if [ -c /dev/kvm ] && getent group kvm >/dev/null && [ "$(stat -c %G /dev/kvm)" != kvm ]; then
	was=$(stat -c %G /dev/kvm)
	chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
	echo "$SCRIPT: /dev/kvm was group $was; now root:kvm 0660, as udev makes it"
fi

# --- daemons -------------------------------------------------------------------
libvirt_answers() {
	timeout 10 virsh -c "$LIBVIRT_URI" version >/dev/null 2>&1
}

# start_daemon NAME EXE SYSPIDFILE OURSFILE ARGS...: starts a daemon that
# writes SYSPIDFILE unless one already runs; records the pid in OURSFILE.
start_daemon() {
	local name=$1 exe=$2 syspid=$3 ours=$4 i pid
	shift 4
	if pid=$(pid_running "$syspid" "$exe"); then
		return 0
	fi
	env -i PATH="$DAEMON_PATH" LANG=C.UTF-8 "$@" "$exe" -d
	for ((i = 0; i < 100; i++)); do
		if pid=$(pid_running "$syspid" "$exe"); then
			echo "$pid" >"$ours"
			echo "$SCRIPT: started $name (pid $pid)"
			return 0
		fi
		sleep 0.1
	done
	die "$name did not start (no live pid in $syspid)"
}

start_daemon virtlogd "$VIRTLOGD" "$VIRTLOGD_SYS_PID" "$VIRTLOGD_OURS"

if [ "$conf_changed" = 1 ] && pid=$(pid_running "$LIBVIRTD_SYS_PID" "$LIBVIRTD"); then
	if [ -s "$LIBVIRTD_OURS" ] && [ "$(<"$LIBVIRTD_OURS")" = "$pid" ]; then
		echo "$SCRIPT: restarting libvirtd (pid $pid) for the new $QEMU_CONF"
		stop_pid "$pid" libvirtd 30
		rm -f "$LIBVIRTD_OURS"
	else
		warn "libvirtd (pid $pid) was not started by this script: restart it yourself to apply $QEMU_CONF"
	fi
fi
start_daemon libvirtd "$LIBVIRTD" "$LIBVIRTD_SYS_PID" "$LIBVIRTD_OURS" \
	LIBVIRT_LOG_OUTPUTS="3:file:$LIBVIRTD_LOG"

for ((i = 0; i < 60; i++)); do
	libvirt_answers && break
	sleep 0.5
done
libvirt_answers || die "libvirtd does not answer at $LIBVIRT_URI after 30s (log: $LIBVIRTD_LOG)"

echo "$SCRIPT: libvirtd answers at $LIBVIRT_URI; emulator $WRAPPER; cgroup_controllers = [ ] ($((SECONDS - start))s)"
