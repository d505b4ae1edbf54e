#!/usr/bin/env bash
# Stops node two of the test bed (what test/bed/node2-up.sh started):
# destroys and undefines every domain of node two's libvirtd (node two is
# the bed's alone, so all of them), stops its libvirtd, virtlogd and
# containerd and both sides of the kube-apiserver and registry bridges,
# stops
# whatever else still runs in node two's network namespace (qemu processes
# whose libvirtd is gone, forwarders a test left), stops the holder, deletes
# the veth and the host's route to node two's pods, removes
# /run/crimux-testbed/node2 and node two's CNI IPAM data, and the host's
# /var/lib/kubelet if node2-up.sh made it (as node two's mount point). Keeps the PKI
# (/etc/crimux-testbed/pki), node two's configs (/etc/crimux-testbed/node2),
# its persistent libvirt dirs (/var/lib/crimux-testbed/node2/root) and its
# containerd's root (/var/lib/crimux-testbed/node2/containerd: its images).
# Idempotent: fine when node two is not up. Node one is left alone.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

# As in node2-up.sh.
N2_RUN=$RUN_DIR/node2
N2_LIB=$LIB_DIR/node2
N2_NS_PID=$N2_RUN/ns.pid
N2_HOLDER_PID=$N2_RUN/holder.pid
N2_NS_NET=$N2_RUN/ns.net
N2_VIRTLOGD_PID=$N2_RUN/virtlogd.pid
N2_LIBVIRTD_PID=$N2_RUN/libvirtd.pid
N2_BRIDGE_HOST_PID=$N2_RUN/apiserver-bridge-host.pid
N2_BRIDGE_NODE_PID=$N2_RUN/apiserver-bridge-node.pid
N2_REG_BRIDGE_HOST_PID=$N2_RUN/registry-bridge-host.pid
N2_REG_BRIDGE_NODE_PID=$N2_RUN/registry-bridge-node.pid
N1_LIBVIRT_TLS_PID=$N2_RUN/node1-libvirt-tls.pid
N2_CTD_PID=$N2_RUN/containerd.pid
N2_KUBELET_MADE=$N2_RUN/var-lib-kubelet.made
N2_CNI_DATA_DIR=$N2_LIB/cni/networks
N2_SUBNET=10.88.78.0/24
N2_SUBNET6=fd00:88:78::/64
VETH=crimux-n2
LIBVIRTD=/usr/sbin/libvirtd
VIRTLOGD=/usr/sbin/virtlogd
SLEEP=$(readlink -f "$(command -v sleep)")
SOCAT=$(readlink -f "$(command -v socat 2>/dev/null || echo /usr/bin/socat)")

done_=()

npid=""
node_net=""
if [ -s "$N2_NS_NET" ]; then
	node_net=$(<"$N2_NS_NET")
	if pid=$(pid_running "$N2_NS_PID" "$SLEEP") && [ "$(readlink "/proc/$pid/ns/net")" = "$node_net" ]; then
		npid=$pid
	fi
fi

# --- domains -------------------------------------------------------------------------
if [ -n "$npid" ] && nsenter -t "$npid" -m -n -- timeout 10 virsh -c qemu:///system version >/dev/null 2>&1; then
	virsh_() { nsenter -t "$npid" -m -n -- timeout 30 virsh -q -c qemu:///system "$@"; }
	n=0
	while IFS= read -r dom; do
		[ -n "$dom" ] || continue
		virsh_ destroy "$dom" >/dev/null 2>&1 || true
		# Managed-save images and snapshot metadata would block undefine;
		# a transient domain is gone once destroyed.
		virsh_ undefine "$dom" --managed-save --snapshots-metadata --nvram >/dev/null 2>&1 ||
			virsh_ undefine "$dom" >/dev/null 2>&1 || true
		n=$((n + 1))
	done < <(virsh_ list --all --name)
	[ "$n" = 0 ] || done_+=("removed $n domain(s)")
fi

# --- daemons -------------------------------------------------------------------------
# By their pid files, whether or not the holder still lives (they may keep
# a node two whose holder died).
for d in "$N2_LIBVIRTD_PID:$LIBVIRTD:libvirtd" "$N2_VIRTLOGD_PID:$VIRTLOGD:virtlogd" \
	"$N2_CTD_PID:$BIN/containerd:containerd"; do
	IFS=: read -r pf exe name <<<"$d"
	if pid=$(pid_running "$pf" "$exe"); then
		stop_pid "$pid" "$name" 30
		done_+=("stopped $name (pid $pid)")
	fi
done

# --- the kube-apiserver and registry bridges ----------------------------------------
# Each side's socat and the children it forked for open connections (the
# host sides' run in the host's namespaces: the sweep below misses them).
for d in "$N2_BRIDGE_NODE_PID:kube-apiserver bridge's node side" "$N2_BRIDGE_HOST_PID:kube-apiserver bridge's host side" \
	"$N2_REG_BRIDGE_NODE_PID:registry bridge's node side" "$N2_REG_BRIDGE_HOST_PID:registry bridge's host side" \
	"$N1_LIBVIRT_TLS_PID:node one's libvirt TLS front"; do
	pf=${d%%:*} side=${d#*:}
	if pid=$(pid_running "$pf" "$SOCAT"); then
		children=$(pgrep -P "$pid" || true)
		stop_pid "$pid" "the $side" 5
		for c in $children; do
			if [ "$(exe_of "$c")" = "$SOCAT" ]; then stop_pid "$c" "a connection of the $side" 5; fi
		done
		done_+=("stopped the $side (pid $pid)")
	fi
done

# --- whatever else runs in node two ------------------------------------------------
# Anything left in its network namespace would keep the namespace, its
# addresses and routes alive after the holder is gone.
if [ -n "$node_net" ]; then
	hpid=$(cat "$N2_HOLDER_PID" 2>/dev/null || true)
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[ "$pid" != "$npid" ] && [ "$pid" != "$hpid" ] || continue
		[ "$(readlink "$p/ns/net" 2>/dev/null)" = "$node_net" ] || continue
		warn "stopping pid $pid left in node two: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-100)"
		stop_pid "$pid" "pid $pid" 10
	done
fi

# --- holder ----------------------------------------------------------------------------
if [ -n "$npid" ]; then
	# unshare --fork exits with its child.
	stop_pid "$npid" "node two's holder" 5
	done_+=("stopped node two (pid $npid)")
fi

# --- network ---------------------------------------------------------------------------
# The routes go with the veth; deleted first in case the veth is not ours.
ip route del "$N2_SUBNET" dev "$VETH" 2>/dev/null || true
ip -6 route del "$N2_SUBNET6" dev "$VETH" 2>/dev/null || true
if ip link show "$VETH" >/dev/null 2>&1; then
	ip link del "$VETH"
	done_+=("deleted $VETH")
fi

# --- state -----------------------------------------------------------------------------
# Node two's bind mounts lived in its own mount namespace only: on the host
# these are plain dirs. The host's /var/lib/kubelet was made as node two's
# mount point: gone with node two, with whatever the bed's kubelets on the
# host left in it meanwhile (they leave a directory they found).
if [ -e "$N2_KUBELET_MADE" ]; then
	rm -rf /var/lib/kubelet
	done_+=("removed /var/lib/kubelet")
fi
rm -rf "$N2_RUN"
if [ -d "$N2_CNI_DATA_DIR" ]; then
	find "$N2_CNI_DATA_DIR" -mindepth 1 -delete
fi

if [ "${#done_[@]}" = 0 ]; then
	echo "node2-down: node two was not up"
else
	summary=$(printf '%s, ' "${done_[@]}")
	echo "node2-down: ${summary%, }"
fi
