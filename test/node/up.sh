#!/usr/bin/env bash
# Boots the crimux test node (test/node/build.sh's disk, behind a
# throw-away overlay) under qemu TCG: 2 vCPUs, NODE_MEM_MIB (3072) of RAM,
# user-mode networking with the node's sshd on 127.0.0.1:NODE_SSH_PORT
# (2222) and a tap to this host for the cluster (lib.sh), its serial console in $NODE_RUN/serial.log,
# its QMP monitor on $NODE_QMP (the power-cut test resets the node there). Waits for SSH, then
# copies the test images crictl needs into the node's registry. Prints how
# long each step took. test/node/down.sh stops it and removes everything.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
NODE_MEM_MIB=${NODE_MEM_MIB:-3072}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-600}
# The OCI layouts (under $TESTBED/images) served in the node.
NODE_IMAGES=${NODE_IMAGES:-pause crimux/busybox crimux/vm-busybox crimux/vm-busybox-agent}

if node_running; then
	echo "node/up.sh: the node already runs (pid $(cat "$NODE_PID"))" >&2
	exit 0
fi
t0=$SECONDS
disk=${NODE_DISK:-$("$here/build.sh" | tail -n 1)}
[ -s "$disk" ] || { echo "node/up.sh: no node disk" >&2; exit 1; }
t_build=$((SECONDS - t0))
rm -rf "$NODE_RUN"
mkdir -p "$NODE_RUN"
install -m 0600 "$(dirname "$disk")/id_ed25519" "$NODE_KEY"
qemu-img create -q -f qcow2 -b "$disk" -F qcow2 "$NODE_RUN/node.qcow2"

# The cluster link (lib.sh): a tap with the host's end addressed.
ip link del "$NODE_TAP" 2>/dev/null || true
ip tuntap add dev "$NODE_TAP" mode tap
ip addr add "$NODE_HOST_IP/30" dev "$NODE_TAP"
ip link set "$NODE_TAP" up

t1=$SECONDS
# -cpu max offers svm/vmx: the node blacklists kvm_amd/kvm_intel
# (files/etc/modprobe.d) so that crimux's accel auto picks tcg. (With
# svm=off,vmx=off here, systemd's mounts failed with 'protocol' at boot.)
# Not niced: the node runs beside the host's suites (test/all.sh), and a
# niced node got next to no CPU while their TCG guests ran (its own VMs,
# TCG inside TCG, then missed every deadline).
qemu-system-x86_64 -name crimux-node -accel tcg,thread=multi -cpu max -smp 2 -m "$NODE_MEM_MIB" \
	-nodefaults -display none -vga none \
	-drive "file=$NODE_RUN/node.qcow2,if=virtio,cache=unsafe,discard=unmap" \
	-netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$NODE_SSH_PORT-:22" -device "virtio-net-pci,netdev=n0,mac=$NODE_UPLINK_MAC" \
	-netdev "tap,id=n1,ifname=$NODE_TAP,script=no,downscript=no" -device "virtio-net-pci,netdev=n1,mac=$NODE_CLUSTER_MAC" \
	-device virtio-rng-pci -serial "file:$NODE_SERIAL" \
	-qmp "unix:$NODE_QMP,server=on,wait=off" \
	-daemonize -pidfile "$NODE_PID"
until node_ssh true 2>/dev/null; do
	node_running || { tail -n 30 "$NODE_SERIAL" >&2; echo "node/up.sh: qemu exited" >&2; exit 1; }
	if [ $((SECONDS - t1)) -gt "$BOOT_TIMEOUT" ]; then
		tail -n 30 "$NODE_SERIAL" >&2
		echo "node/up.sh: no SSH after ${BOOT_TIMEOUT}s" >&2
		exit 1
	fi
	sleep 3
done
t_boot=$((SECONDS - t1))

t2=$SECONDS
# shellcheck disable=SC2086 # a list of names
(cd "$TESTBED/images" && tar -cf - $NODE_IMAGES) | node_ssh 'tar -xf - -C /var/lib/crimux-node/images'
# The release the node was installed from (build.sh), for the upgrade test.
node_ssh 'cat >/root/crimux-release.tar.gz' <"$(dirname "$disk")/crimux-release.tar.gz"
node_ssh 'systemctl is-system-running --wait >/dev/null || systemctl --failed --no-legend; systemctl is-active crimux containerd libvirtd crimux-test-registry' >&2
echo "node/up.sh: up (disk ${t_build}s, boot to ssh ${t_boot}s, images+units $((SECONDS - t2))s); ssh: test/node/run.sh CMD" >&2
