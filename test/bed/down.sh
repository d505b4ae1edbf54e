#!/usr/bin/env bash
# Stops the test bed and cleans up what it left on the host: removes all
# pods (crictl rmp -fa), stops containerd and the registry, deletes the
# crimuxbr0 bridge, the CNI-* iptables and ip6tables chains of the test bed's
# network, the network namespaces, the IPAM data and containerd's state;
# restores net.ipv4.ip_forward and net.ipv6.conf.all.forwarding. Keeps the caches ($TESTBED), containerd's root (the
# pulled images) and the logs in /run/crimux-testbed.
#   --purge  also removes containerd's root, /var/lib/crimux-testbed and
#            /etc/crimux-testbed.
# Idempotent; prints one summary line.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS
purge=false
case "${1:-}" in
--purge) purge=true ;;
"") ;;
*) die "usage: down.sh [--purge]" ;;
esac
notes=()

# --- pods and containerd --------------------------------------------------------
pods=0
if ctd_pid=$(pid_running "$CTD_PID" "$BIN/containerd"); then
	if containerd_answers; then
		pods=$(crictl_ctd pods -q 2>/dev/null | grep -c . || true)
		if [ "$pods" -gt 0 ]; then
			"$BIN/crictl" --runtime-endpoint "$CTD_ENDPOINT" --timeout 60s rmp -fa >/dev/null 2>&1 || warn "crictl rmp -fa failed; killing what is left"
		fi
	else
		warn "containerd (pid $ctd_pid) does not answer; pods are not removed cleanly"
	fi
	stop_pid "$ctd_pid" containerd 20
	notes+=("containerd (pid $ctd_pid) stopped, $pods pods removed")
fi
rm -f "$CTD_PID" "$CTD_CONFIG_HASH"

# Leftovers of an unclean stop: containers (runc state under our runc root)
# and shims serving our containerd address. Only processes of this test bed.
if [ -d "$RUNC_ROOT" ]; then
	for ns_root in "$RUNC_ROOT"/*/; do
		[ -d "$ns_root" ] || continue
		for id in $(runc --root "$ns_root" list -q 2>/dev/null); do
			runc --root "$ns_root" delete -f "$id" >/dev/null 2>&1 || warn "runc delete -f $id failed"
			notes+=("container $id killed")
		done
	done
fi
shims=()
for d in /proc/[0-9]*; do
	[ "$(exe_of "${d#/proc/}")" = "$BIN/containerd-shim-runc-v2" ] || continue
	tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "-address $CTD_SOCK " && shims+=("${d#/proc/}")
done
for pid in "${shims[@]}"; do
	stop_pid "$pid" "containerd-shim" 5
done
[ ${#shims[@]} -eq 0 ] || notes+=("${#shims[@]} shims stopped")

# --- registry ----------------------------------------------------------------------
# (A second instance shares the default bed's registry: it stays.)
if [ -z "$BED_INSTANCE" ]; then
	if reg_pid=$(pid_running "$REG_PID" "$REG_BIN"); then
		stop_pid "$reg_pid" registry 5
		notes+=("registry (pid $reg_pid) stopped")
	fi
	rm -f "$REG_PID"
fi

# --- network -----------------------------------------------------------------------
# Network namespaces: bind mounts inside containerd's mount namespace (gone
# with it); on the host only the files are left.
netns_dir=$CTD_STATE/io.containerd.grpc.v1.cri/netns
nns=0
if [ -d "$netns_dir" ]; then
	for f in "$netns_dir"/*; do
		[ -e "$f" ] || continue
		mountpoint -q "$f" && umount -l "$f"
		rm -f "$f"
		nns=$((nns + 1))
	done
fi
[ "$nns" -eq 0 ] || notes+=("$nns netns removed")

if ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link del "$BRIDGE"
	notes+=("bridge $BRIDGE deleted")
fi

# iptables: per-pod chains of our network (portmap's CNI-DN-*, bridge's
# ipMasq CNI-<hash>, identified by the network name in their comments), then
# portmap's shared CNI-HOSTPORT-* chains if no other CNI network uses them.
chains_removed=0
# delete_chain IPTABLES TABLE CHAIN: drops every rule jumping to CHAIN, then
# CHAIN (IPTABLES: iptables or ip6tables, the pod network being dual stack).
delete_chain() {
	local ipt=$1 t=$2 c=$3 rule
	while read -r rule; do
		# shellcheck disable=SC2086 # the rule is re-split into arguments on purpose
		eval "$ipt -w -t $t ${rule/#-A /-D }" 2>/dev/null || true
	done < <($ipt -w -t "$t" -S 2>/dev/null | grep -E -- "^-A .* -j $c( |\$)" || true)
	$ipt -w -t "$t" -F "$c" 2>/dev/null || true
	$ipt -w -t "$t" -X "$c" 2>/dev/null && chains_removed=$((chains_removed + 1))
	return 0
}
for ipt in iptables ip6tables; do
	command -v $ipt >/dev/null || continue
	for t in nat filter mangle; do
		for c in $($ipt -w -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ { print $2 }'); do
			[[ $c == CNI-HOSTPORT-* ]] && continue
			if $ipt -w -t "$t" -S "$c" 2>/dev/null | grep -qE -- "$CNI_NETWORK|${SUBNET%/*}|${SUBNET6%/*}"; then
				delete_chain $ipt "$t" "$c"
			fi
		done
		# Shared chains: only when nothing else (another CNI network) uses them.
		others=$($ipt -w -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ && $2 !~ /^CNI-HOSTPORT-/' | wc -l)
		if [ "$others" -eq 0 ]; then
			for c in $($ipt -w -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-HOSTPORT-/ { print $2 }'); do
				delete_chain $ipt "$t" "$c"
			done
		fi
	done
done
[ "$chains_removed" -eq 0 ] || notes+=("$chains_removed iptables chains deleted")

if [ -s "$IP_FORWARD_SAVED" ]; then
	cat "$IP_FORWARD_SAVED" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || warn "cannot restore net.ipv4.ip_forward"
	rm -f "$IP_FORWARD_SAVED"
fi
if [ -s "$IP6_FORWARD_SAVED" ]; then
	cat "$IP6_FORWARD_SAVED" >/proc/sys/net/ipv6/conf/all/forwarding 2>/dev/null || warn "cannot restore net.ipv6.conf.all.forwarding"
	rm -f "$IP6_FORWARD_SAVED"
fi
rm -rf "$CNI_DATA_DIR"

# Empty per-container cgroups that runc left behind (it does not always remove
# the unified-hierarchy ones on this hybrid host). rmdir only succeeds on a
# cgroup without processes or children, so live containers are never touched.
cgroups=0
for d in /sys/fs/cgroup/*/k8s.io/*/ /sys/fs/cgroup/k8s.io/*/; do
	[ -d "$d" ] || continue
	[[ $(basename "$d") =~ ^[0-9a-f]{64}$ ]] || continue
	rmdir "$d" 2>/dev/null && cgroups=$((cgroups + 1))
done
[ "$cgroups" -eq 0 ] || notes+=("$cgroups empty container cgroups removed")

# --- state ---------------------------------------------------------------------------
# Anything still mounted below the state dirs in this namespace goes first;
# --one-file-system keeps rm away from anything we failed to unmount.
for dir in "$CTD_STATE" "$RUNC_ROOT"; do
	[ -d "$dir" ] || continue
	awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf --one-file-system "$dir"
done
if $purge; then
	[ -d "$LIB_DIR" ] && rm -rf --one-file-system "$LIB_DIR" && notes+=("$LIB_DIR purged")
	[ -d "$ETC_DIR" ] && rm -rf "$ETC_DIR" && notes+=("$ETC_DIR purged")
fi

if [ ${#notes[@]} -eq 0 ]; then
	summary="nothing was running"
else
	summary=$(printf '; %s' "${notes[@]}")
	summary=${summary#; }
fi
echo "down: $summary ($((SECONDS - start))s)"
