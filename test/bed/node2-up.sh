#!/usr/bin/env bash
# Starts node two of the test bed (issue 42): a second libvirtd on this
# machine, so that live migration between two libvirtds can be tested
# without a second machine. Node one is the host's own bed (up.sh,
# libvirt-up.sh); node two is a holder process in new mount and network
# namespaces, joined to the host by a veth pair (host crimux-n2 10.231.0.1,
# node eth0 10.231.0.2), with its own /run/libvirt, /var/lib/libvirt,
# /var/cache/libvirt, /var/log/libvirt, /etc/libvirt, /run/crimux and
# /var/lib/kubelet bound over the host's, and its own virtlogd, libvirtd
# (TLS on 10.231.0.2:16514, client certificates of the two nodes only) and
# containerd (socket /run/crimux-testbed/node2/containerd/containerd.sock,
# its own root, pulling from the bed's registry through a bridge).
# Everything else (/run/crimux-testbed, the rest of /var/lib, /dev, the
# qemu wrapper) is the host's. Also writes the PKI
# of both nodes and node two's CNI config, routes the two pod networks to
# each other, and bridges node two's 127.0.0.1:16443 to the host's (the
# test bed cluster's kube-apiserver, test/cluster) through a Unix socket,
# so that a kubelet and crimux in node two join the cluster.
# Idempotent: whatever already runs and answers is left alone, except that
# node two's libvirtd is restarted when its config or certificates changed.
# Needs libvirt-up.sh to have run (node two copies the host's libvirt config
# and mount namespace as they are then). test/bed/node2-down.sh undoes it;
# test/bed/node2-exec.sh runs a command in node two.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=../cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh" # APISERVER_PORT
need_root
start=$SECONDS

# The names below are shared with node2-down.sh and node2-exec.sh: keep
# them in step.
N2_RUN=$RUN_DIR/node2             # runtime state: pids, logs, /run dirs
N2_LIB=$LIB_DIR/node2             # persistent dirs of node two
N2_ETC=$ETC_DIR/node2             # node two's own configs
N2_NS_PID=$N2_RUN/ns.pid          # the sleep inside the namespaces
N2_HOLDER_PID=$N2_RUN/holder.pid  # its parent, unshare --fork
N2_NS_NET=$N2_RUN/ns.net          # the netns' identity, against pid reuse
N2_VIRTLOGD_PID=$N2_RUN/virtlogd.pid
N2_LIBVIRTD_PID=$N2_RUN/libvirtd.pid
N2_LIBVIRTD_LOG=$N2_RUN/libvirtd.log
N2_LIBVIRTD_HASH=$N2_RUN/libvirtd.config.sha256 # config the running libvirtd read
N2_ETC_LIBVIRT=$N2_LIB/root/etc/libvirt
N2_ETC_HASH=$N2_LIB/etc-libvirt.sha256          # config the copy was made from
# The kube-apiserver bridge: a socat on each side of a Unix socket.
N2_APISERVER_SOCK=$N2_RUN/apiserver.sock
N2_BRIDGE_HOST_PID=$N2_RUN/apiserver-bridge-host.pid
N2_BRIDGE_NODE_PID=$N2_RUN/apiserver-bridge-node.pid
N2_BRIDGE_LOG=$N2_RUN/apiserver-bridge.log
# The registry bridge: the same, to the bed's registry ($REG_ADDR).
N2_REGISTRY_SOCK=$N2_RUN/registry.sock
N2_REG_BRIDGE_HOST_PID=$N2_RUN/registry-bridge-host.pid
N2_REG_BRIDGE_NODE_PID=$N2_RUN/registry-bridge-node.pid
# Node one's libvirt TLS front: node two's libvirtd reaches the host's.
N1_LIBVIRT_TLS_PID=$N2_RUN/node1-libvirt-tls.pid
# Node two's containerd: its own root (images, snapshots: kept, a cache
# like the host's), state, socket and runc root.
N2_CTD_ROOT=$N2_LIB/containerd
N2_CTD_STATE=$N2_RUN/containerd
N2_CTD_SOCK=$N2_CTD_STATE/containerd.sock
N2_CTD_CONFIG=$N2_RUN/containerd.toml
N2_CTD_PID=$N2_RUN/containerd.pid
N2_CTD_LOG=$N2_RUN/containerd.log
# Set when this script made the host's /var/lib/kubelet (node two's mount
# point): node2-down.sh removes it then.
N2_KUBELET_MADE=$N2_RUN/var-lib-kubelet.made
N2_CNI_CONF_DIR=$N2_ETC/cni/net.d
N2_CNI_DATA_DIR=$N2_LIB/cni/networks
N2_CNI_NETWORK=crimux-testbed-node2
N2_BRIDGE=crimuxbr2
N2_SUBNET=10.88.78.0/24
N2_SUBNET6=fd00:88:78::/64
VETH=crimux-n2 # host side; the node side is eth0
HOST_IP=10.231.0.1
NODE_IP=10.231.0.2
HOST_IP6=fd00:231::1
NODE_IP6=fd00:231::2
PKI_DIR=$ETC_DIR/pki
CA_DIR=$PKI_DIR/ca
NODES=(node1:$HOST_IP node2:$NODE_IP)
NODE_URI="qemu+tls://$NODE_IP/system"

LIBVIRTD=/usr/sbin/libvirtd
VIRTLOGD=/usr/sbin/virtlogd
WRAPPER=/usr/local/lib/crimux/crimux-qemu-wrapper
SLEEP=$(readlink -f "$(command -v sleep)")
# Certificates are renewed when they expire within 30 days.
MIN_LIFE=$((30 * 24 * 3600))

# --- node one must be up ----------------------------------------------------------
# Node two's mount namespace is a copy of the host's taken when the holder
# starts (hugetlbfs included) and its /etc/libvirt a copy of the host's with
# libvirt-up.sh's qemu.conf: both must be there first.
grep -q "^# crimux: libvirt must not manage qemu.s cgroups" /etc/libvirt/qemu.conf 2>/dev/null ||
	die "/etc/libvirt/qemu.conf lacks crimux's settings: run test/bed/libvirt-up.sh (make bed) first"
[ -x "$WRAPPER" ] || die "$WRAPPER is missing: run test/bed/libvirt-up.sh (make bed) first"
awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/self/mounts ||
	die "no hugetlbfs mounted: run test/bed/libvirt-up.sh (make bed) first"
timeout 10 virsh -c qemu:///system version >/dev/null 2>&1 ||
	die "the host's libvirtd does not answer at qemu:///system: run test/bed/libvirt-up.sh (make bed) first"
# openssl: node two's key pairs; socat: the kube-apiserver bridge (a bare
# machine may lack them).
for p in openssl socat; do
	command -v "$p" >/dev/null && continue
	export DEBIAN_FRONTEND=noninteractive
	# Without an apt-get update first if the package lists have it.
	apt-get install -y -q --no-install-recommends "$p" >/dev/null 2>&1 ||
		{ quiet apt-update apt-get update && quiet apt-install apt-get install -y -q --no-install-recommends "$p"; }
done
SOCAT=$(readlink -f "$(command -v socat)")
for c in openssl socat nsenter unshare ip tar; do
	command -v "$c" >/dev/null || die "$c is missing"
done

mkdir -p "$N2_RUN" "$N2_CNI_CONF_DIR" "$N2_CNI_DATA_DIR"

# write_file PATH [MODE]: stdin to PATH, only if the content changed.
write_file() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
	else
		chmod "${2:-0644}" "$tmp"
		mv -f "$tmp" "$1"
	fi
}

# --- PKI: a CA and one certificate per node -----------------------------------------
# Each node's dir holds libvirt's file names, so it serves both as
# libvirtd's ca_file/cert_file/key_file and as a client's
# ?pkipath=: one certificate per node, for serverAuth and clientAuth, is
# both servercert.pem and clientcert.pem. libvirtd's tls_allowed_dn_list
# checks the subject, CN=nodeN; clients check the IP in subjectAltName.
# Made once; kept while valid (a node's certificate is reissued if it is
# not, everything if the CA is not).

# key_matches KEY CERT
key_matches() {
	local k c
	k=$(openssl pkey -in "$1" -pubout 2>/dev/null) || return 1
	c=$(openssl x509 -in "$2" -noout -pubkey 2>/dev/null) || return 1
	[ -n "$k" ] && [ "$k" = "$c" ]
}

ca_valid() {
	[ -s "$CA_DIR/cacert.pem" ] && [ -s "$CA_DIR/cakey.pem" ] &&
		key_matches "$CA_DIR/cakey.pem" "$CA_DIR/cacert.pem" &&
		openssl x509 -in "$CA_DIR/cacert.pem" -noout -checkend "$MIN_LIFE" >/dev/null 2>&1
}

# node_valid NAME IP
node_valid() {
	local d=$PKI_DIR/$1 f
	for f in cacert.pem servercert.pem serverkey.pem clientcert.pem clientkey.pem; do
		[ -s "$d/$f" ] || return 1
	done
	cmp -s "$d/cacert.pem" "$CA_DIR/cacert.pem" &&
		cmp -s "$d/servercert.pem" "$d/clientcert.pem" &&
		cmp -s "$d/serverkey.pem" "$d/clientkey.pem" &&
		key_matches "$d/serverkey.pem" "$d/servercert.pem" &&
		[ "$(openssl x509 -in "$d/servercert.pem" -noout -subject -nameopt RFC2253)" = "subject=CN=$1" ] &&
		openssl verify -CAfile "$CA_DIR/cacert.pem" -purpose sslserver -verify_ip "$2" "$d/servercert.pem" >/dev/null 2>&1 &&
		openssl verify -CAfile "$CA_DIR/cacert.pem" -purpose sslclient "$d/clientcert.pem" >/dev/null 2>&1 &&
		openssl x509 -in "$d/servercert.pem" -noout -checkend "$MIN_LIFE" >/dev/null 2>&1
}

pki_tmp=$(mktemp -d /tmp/crimux-testbed-pki.XXXXXX)
trap 'rm -rf "$pki_tmp"' EXIT
pki_made=()
install -d -m 0700 -o root -g root "$PKI_DIR" "$CA_DIR"
if ! ca_valid; then
	cat >"$pki_tmp/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = crimux-testbed-ca
[ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
	(umask 077 && quiet openssl-ca openssl req -x509 -new -config "$pki_tmp/ca.cnf" -extensions ext \
		-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-keyout "$pki_tmp/cakey.pem" -out "$pki_tmp/cacert.pem")
	install -m 0600 "$pki_tmp/cakey.pem" "$CA_DIR/cakey.pem"
	install -m 0644 "$pki_tmp/cacert.pem" "$CA_DIR/cacert.pem"
	pki_made+=(CA)
fi
for n in "${NODES[@]}"; do
	name=${n%%:*} ip=${n#*:} d=$PKI_DIR/${n%%:*}
	install -d -m 0700 -o root -g root "$d"
	if ! node_valid "$name" "$ip"; then
		# keyEncipherment next to digitalSignature: libvirt's own
		# certificate check asks for both (non-critical, so only a warning
		# if absent, but quiet logs are worth it).
		printf '%s\n' "basicConstraints = critical, CA:FALSE" \
			"keyUsage = digitalSignature, keyEncipherment" \
			"extendedKeyUsage = serverAuth, clientAuth" \
			"subjectAltName = IP:$ip, DNS:$name" \
			"subjectKeyIdentifier = hash" \
			"authorityKeyIdentifier = keyid" >"$pki_tmp/$name.ext"
		(umask 077 && quiet "openssl-$name" openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-subj "/CN=$name" -keyout "$pki_tmp/$name.key" -out "$pki_tmp/$name.csr")
		quiet "openssl-$name" openssl x509 -req -in "$pki_tmp/$name.csr" -CA "$CA_DIR/cacert.pem" \
			-CAkey "$CA_DIR/cakey.pem" -set_serial "0x$(openssl rand -hex 16)" -days 825 \
			-extfile "$pki_tmp/$name.ext" -out "$pki_tmp/$name.pem"
		install -m 0644 "$CA_DIR/cacert.pem" "$d/cacert.pem"
		for role in server client; do
			install -m 0644 "$pki_tmp/$name.pem" "$d/${role}cert.pem"
			install -m 0600 "$pki_tmp/$name.key" "$d/${role}key.pem"
		done
		pki_made+=("$name")
	fi
	chmod 0600 "$d/serverkey.pem" "$d/clientkey.pem"
done
chmod 0600 "$CA_DIR/cakey.pem"
[ "${#pki_made[@]}" = 0 ] || echo "$SCRIPT: made certificates in $PKI_DIR: ${pki_made[*]}"

# --- node two's CNI config -----------------------------------------------------------
# Like the host's (up.sh) but its own network name, bridge, subnets and IPAM
# data, so the two nodes' pods never share an address. The bridge lives in
# node two's network namespace, made by the first pod there.
cni_conflist "$N2_CNI_NETWORK" "$N2_BRIDGE" "$N2_SUBNET" "$N2_SUBNET6" "$N2_CNI_DATA_DIR" |
	write_file "$N2_CNI_CONF_DIR/10-$N2_CNI_NETWORK.conflist"

# --- node two's /etc/libvirt -------------------------------------------------------
# A copy of the host's, qemu.conf included (cgroup_controllers = [ ], the
# qemu wrapper works the same in both nodes), without the host libvirtd's
# own objects: its domains and networks (qemu/), secrets and storage
# pools. libvirtd.conf gets the TLS listener. Recopied when the host's
# changed; node two's own qemu/ and secrets/ stay.
ETC_SKIP=(qemu secrets storage libvirtd.conf)
etc_tar() {
	local ex=() e
	for e in "${ETC_SKIP[@]}"; do ex+=("--exclude=./$e"); done
	tar --sort=name -C /etc/libvirt "${ex[@]}" "$@" -cf - .
}
# Active settings of the host's that ours replace are dropped (a list may
# span lines).
libvirtd_conf=$(
	awk -v keys="listen_tls listen_tcp listen_addr ca_file cert_file key_file crl_file tls_no_verify_certificate tls_allowed_dn_list" '
		BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) drop[k[i]] = 1 }
		skipping { if ($0 ~ /\]/) skipping = 0; next }
		/^[ \t]*[a-z_]+[ \t]*=/ {
			key = $0; sub(/^[ \t]*/, "", key); sub(/[ \t]*=.*/, "", key)
			if (key in drop) { if ($0 ~ /\[/ && $0 !~ /\]/) skipping = 1; next }
		}
		{ print }
	' /etc/libvirt/libvirtd.conf
	cat <<EOF
# crimux test bed node two (written by test/bed/node2-up.sh; edits are overwritten):
# TLS only, on node two's address, for the two nodes' certificates only.
listen_tls = 1
listen_tcp = 0
listen_addr = "$NODE_IP"
ca_file = "$PKI_DIR/node2/cacert.pem"
cert_file = "$PKI_DIR/node2/servercert.pem"
key_file = "$PKI_DIR/node2/serverkey.pem"
tls_no_verify_certificate = 0
tls_allowed_dn_list = [ "CN=node1", "CN=node2" ]
EOF
)
# The hash covers what node two's libvirtd reads at start: the copied
# config (content, modes, owners; not times) and its certificates.
etc_hash=$({ etc_tar --mtime=@0; printf '%s\n' "$libvirtd_conf"; } | sha256sum | cut -d' ' -f1)
config_hash=$({ echo "$etc_hash"; cat "$PKI_DIR"/node2/*.pem; } | sha256sum | cut -d' ' -f1)

# The bind-mount sources: never removed or replaced while node two runs
# (a mount holds the inode, not the path).
mkdir -p "$N2_ETC_LIBVIRT"
if [ "$(cat "$N2_ETC_HASH" 2>/dev/null)" != "$etc_hash" ] || [ ! -s "$N2_ETC_LIBVIRT/libvirtd.conf" ]; then
	# All but node two's own objects (libvirtd.conf is written anew).
	find "$N2_ETC_LIBVIRT" -mindepth 1 -maxdepth 1 \
		-not -name qemu -not -name secrets -not -name storage -exec rm -rf {} +
	etc_tar | tar -C "$N2_ETC_LIBVIRT" -xf -
	printf '%s\n' "$libvirtd_conf" | write_file "$N2_ETC_LIBVIRT/libvirtd.conf" "$(stat -c %a /etc/libvirt/libvirtd.conf)"
	install -d -m 0755 "$N2_ETC_LIBVIRT/qemu"
	install -d -m 0700 "$N2_ETC_LIBVIRT/secrets"
	echo "$etc_hash" >"$N2_ETC_HASH"
fi

# The other bind-mount sources, fresh dirs with the owner and mode of the
# host's (libvirtd makes what it needs inside).
BINDS=(
	"$N2_RUN/root/run/libvirt:/run/libvirt"
	"$N2_LIB/root/var/lib/libvirt:/var/lib/libvirt"
	"$N2_LIB/root/var/cache/libvirt:/var/cache/libvirt"
	"$N2_LIB/root/var/log/libvirt:/var/log/libvirt"
	"$N2_ETC_LIBVIRT:/etc/libvirt"
	# crimux's own runtime dir (its sockets: crimux.sock, placement.sock,
	# which the qemu wrapper of node two's libvirtd must find there, and
	# netns): a crimux in node two must not meet node one's.
	"$N2_RUN/root/run/crimux:/run/crimux"
	# kubelet's device-plugin and pod-resources sockets, which it puts in
	# /var/lib/kubelet whatever its --root-dir: a kubelet in node two must
	# not take node one's. Under $N2_RUN: nothing in it outlives node two.
	"$N2_RUN/root/var/lib/kubelet:/var/lib/kubelet"
)
# /run/crimux and /var/lib/kubelet need not exist on the host; node two's
# mount points must (on the filesystems both namespaces share: empty dirs).
mkdir -p /run/crimux
if [ ! -e /var/lib/kubelet ]; then
	install -d -m 0755 /var/lib/kubelet
	: >"$N2_KUBELET_MADE"
fi
for b in "${BINDS[@]}"; do
	src=${b%%:*} dst=${b#*:}
	if [ ! -d "$src" ]; then
		mkdir -p "$src"
		chown --reference="$dst" "$src"
		chmod --reference="$dst" "$src"
	fi
done

# --- the holder: new mount and network namespaces ----------------------------------
# node_pid: prints the pid of node two's sleep if it runs in the network
# namespace recorded when it started.
node_pid() {
	local pid
	pid=$(pid_running "$N2_NS_PID" "$SLEEP") || return 1
	[ -s "$N2_NS_NET" ] && [ "$(readlink "/proc/$pid/ns/net")" = "$(<"$N2_NS_NET")" ] || return 1
	echo "$pid"
}

# node_daemon PIDFILE EXE: prints the pid if PIDFILE names EXE running in
# node two's network namespace.
node_daemon() {
	local pid
	pid=$(pid_running "$1" "$2") || return 1
	[ "$(readlink "/proc/$pid/ns/net")" = "$node_net" ] || return 1
	echo "$pid"
}

in_node() { nsenter -t "$npid" -m -n -- "$@"; }

node_state=running
if ! npid=$(node_pid); then
	# Daemons of a node two whose holder died still hold its namespaces.
	for d in "$N2_LIBVIRTD_PID:$LIBVIRTD:libvirtd" "$N2_VIRTLOGD_PID:$VIRTLOGD:virtlogd" \
		"$N2_CTD_PID:$BIN/containerd:containerd" \
		"$N2_BRIDGE_NODE_PID:$SOCAT:kube-apiserver bridge" "$N2_REG_BRIDGE_NODE_PID:$SOCAT:registry bridge"; do
		IFS=: read -r pf exe name <<<"$d"
		if pid=$(pid_running "$pf" "$exe"); then
			warn "stopping $name (pid $pid) of a node two whose holder is gone"
			stop_pid "$pid" "$name" 30
		fi
		rm -f "$pf"
	done
	rm -f "$N2_NS_PID" "$N2_HOLDER_PID" "$N2_NS_NET" "$N2_LIBVIRTD_HASH"
	# Detached (setsid, no inherited descriptors) so that nobody waits on
	# it; unshare forks, so the namespaces' process is its child.
	(cd / && exec env -i PATH="$DAEMON_PATH" setsid unshare --mount --net --propagation private --fork -- \
		sleep infinity </dev/null >/dev/null 2>&1) &
	hpid=$!
	npid=""
	for ((i = 0; i < 50; i++)); do
		child=$(pgrep -P "$hpid" || true)
		if [ -n "$child" ] && [ "$(exe_of "$child")" = "$SLEEP" ] &&
			[ "$(readlink "/proc/$child/ns/net")" != "$(readlink /proc/self/ns/net)" ] &&
			[ "$(readlink "/proc/$child/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]; then
			npid=$child
			break
		fi
		kill -0 "$hpid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$npid" ] || die "the holder of node two's namespaces did not start"
	echo "$hpid" >"$N2_HOLDER_PID"
	readlink "/proc/$npid/ns/net" >"$N2_NS_NET"
	echo "$npid" >"$N2_NS_PID"
	node_state=started
fi
node_net=$(<"$N2_NS_NET")

# --- network: veth, addresses, routes ------------------------------------------------
# A veth whose peer is not node two's eth0 is left from an earlier node
# two (its namespace kept alive by some process): made again.
if ip link show "$VETH" >/dev/null 2>&1; then
	peer_ok=false
	# (Not /sys/class/net inside node two: its sysfs is the host's mount,
	# which shows the host's network namespace.)
	if link=$(in_node ip -o link show dev eth0 2>/dev/null) &&
		[[ $link =~ ^[0-9]+:\ eth0@if([0-9]+): ]] &&
		[ "${BASH_REMATCH[1]}" = "$(cat "/sys/class/net/$VETH/ifindex")" ]; then
		peer_ok=true
	fi
	$peer_ok || { warn "deleting a stale $VETH"; ip link del "$VETH"; }
fi
if ! ip link show "$VETH" >/dev/null 2>&1; then
	# The peer is made inside node two directly, so its name eth0 never
	# meets the host's eth0.
	ip link add "$VETH" type veth peer name eth0 netns "$npid"
fi
ip addr replace "$HOST_IP/24" dev "$VETH"
ip -6 addr replace "$HOST_IP6/64" dev "$VETH" nodad
ip link set "$VETH" up
in_node ip link set lo up
in_node ip addr replace "$NODE_IP/24" dev eth0
in_node ip -6 addr replace "$NODE_IP6/64" dev eth0 nodad
in_node ip link set eth0 up
# Each node routes the other's pod network through the veth. Node two
# forwards for its pods; the host's forwarding is the bed's (the bridge
# plugin turns it on with the first pod; down.sh restores it).
ip route replace "$N2_SUBNET" via "$NODE_IP" dev "$VETH"
ip -6 route replace "$N2_SUBNET6" via "$NODE_IP6" dev "$VETH"
in_node ip route replace "$SUBNET" via "$HOST_IP" dev eth0
in_node ip -6 route replace "$SUBNET6" via "$HOST_IP6" dev eth0
in_node sysctl -q -w net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1

# --- mounts ----------------------------------------------------------------------------
# A path is bound when it shows the source's inode inside node two.
# The namespace's mounts are private: none of this reaches the host.
bound=0
for b in "${BINDS[@]}"; do
	src=${b%%:*} dst=${b#*:}
	[ "$(in_node stat -c %d:%i "$dst" 2>/dev/null)" = "$(stat -c %d:%i "$src")" ] && continue
	# The host's mounts below dst (crimux's shared netns dir and its pod
	# namespaces) came with the copy: gone first, or they stay listed in
	# node two's mountinfo under the bind and look like its own.
	in_node sh -c 'findmnt -rn -o TARGET | grep "^$1/" | sort -r | xargs -r -n1 umount -l' sh "$dst"
	in_node mount --bind "$src" "$dst"
	bound=$((bound + 1))
done
if [ "$bound" != 0 ] && [ "$node_state" = running ]; then
	warn "bound $bound dir(s) that a running node two lacked; its daemons are restarted"
	for d in "$N2_LIBVIRTD_PID:$LIBVIRTD:libvirtd" "$N2_VIRTLOGD_PID:$VIRTLOGD:virtlogd"; do
		IFS=: read -r pf exe name <<<"$d"
		if pid=$(node_daemon "$pf" "$exe"); then stop_pid "$pid" "$name" 30; fi
	done
fi

# --- daemons ---------------------------------------------------------------------------
# Their pid files are node two's own (the defaults, /run/libvirtd.pid and
# /run/virtlogd.pid, are node one's: /run is shared).
libvirt_answers() {
	in_node timeout 10 virsh -c qemu:///system version >/dev/null 2>&1
}

# start_node_daemon NAME EXE PIDFILE ENV... -- ARGS...: starts EXE -d in node
# two unless it runs there; fails (status 1) if it already ran.
start_node_daemon() {
	local name=$1 exe=$2 pf=$3 i pid envs=()
	shift 3
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	if node_daemon "$pf" "$exe" >/dev/null; then
		return 1
	fi
	(cd / && quiet "node2-$name" nsenter -t "$npid" -m -n -- \
		env -i PATH="$DAEMON_PATH" LANG=C.UTF-8 "${envs[@]}" "$exe" -d -p "$pf" "$@")
	for ((i = 0; i < 100; i++)); do
		if pid=$(node_daemon "$pf" "$exe"); then
			echo "$SCRIPT: started $name of node two (pid $pid)"
			return 0
		fi
		sleep 0.1
	done
	die "$name of node two did not start (no live pid in $pf)"
}

start_node_daemon virtlogd "$VIRTLOGD" "$N2_VIRTLOGD_PID" -- || true

if pid=$(node_daemon "$N2_LIBVIRTD_PID" "$LIBVIRTD") &&
	[ "$(cat "$N2_LIBVIRTD_HASH" 2>/dev/null)" != "$config_hash" ]; then
	# Domains keep running across a libvirtd restart.
	echo "$SCRIPT: restarting node two's libvirtd (pid $pid) for its new config or certificates"
	stop_pid "$pid" libvirtd 30
fi
libvirtd_state=running
if start_node_daemon libvirtd "$LIBVIRTD" "$N2_LIBVIRTD_PID" LIBVIRT_LOG_OUTPUTS="3:file:$N2_LIBVIRTD_LOG" -- --listen; then
	echo "$config_hash" >"$N2_LIBVIRTD_HASH"
	libvirtd_state=started
fi

# The first start probes qemu's capabilities afresh (node two has its own
# cache): slower than node one's restarts.
for ((i = 0; i < 120; i++)); do
	libvirt_answers && break
	sleep 0.5
done
libvirt_answers || die "node two's libvirtd does not answer after 60s (log: $N2_LIBVIRTD_LOG)"

# --- the kube-apiserver bridge ------------------------------------------------------
# The test bed cluster's kube-apiserver (test/cluster) listens on the
# host's 127.0.0.1:$APISERVER_PORT only. Node two's kubelet and crimux
# reach it at node two's own 127.0.0.1:$APISERVER_PORT, the same URL (one
# its serving certificate names): a socat there forwards to a Unix socket
# only root can open (in /run/crimux-testbed, both nodes' own), where a
# socat on the host forwards to kube-apiserver. No listener on any network
# address: nothing on the veth or beyond reaches kube-apiserver through it.
# Each connection dials anew, so the bridge may come up before the cluster
# and outlive it.

# bridge_pid PIDFILE NETNS: prints the pid if PIDFILE names socat running
# in the network namespace NETNS.
bridge_pid() {
	local pid
	pid=$(pid_running "$1" "$SOCAT") || return 1
	[ "$(readlink "/proc/$pid/ns/net")" = "$2" ] || return 1
	echo "$pid"
}

# start_bridge NAME PIDFILE NETNS CMD...: runs CMD (which execs socat in
# NETNS) detached, unless PIDFILE's socat runs there; fails (status 1) if
# it already ran.
start_bridge() {
	local name=$1 pf=$2 netns=$3 i
	shift 3
	bridge_pid "$pf" "$netns" >/dev/null && return 1
	# setsid, env and nsenter (no new pid namespace) all exec: $! is socat's.
	(cd / && umask 077 && exec env -i PATH="$DAEMON_PATH" setsid "$@" </dev/null >>"$N2_BRIDGE_LOG" 2>&1) &
	echo $! >"$pf"
	for ((i = 0; i < 50; i++)); do
		bridge_pid "$pf" "$netns" >/dev/null && return 0
		sleep 0.1
	done
	tail -n 5 "$N2_BRIDGE_LOG" >&2
	die "the $name did not start (log: $N2_BRIDGE_LOG)"
}

host_net=$(readlink /proc/self/ns/net)
# A host side whose socket is gone serves nobody: started again.
if pid=$(bridge_pid "$N2_BRIDGE_HOST_PID" "$host_net") && [ ! -S "$N2_APISERVER_SOCK" ]; then
	stop_pid "$pid" "the kube-apiserver bridge's host side" 5
fi
bridge_state=running
start_bridge "kube-apiserver bridge's host side" "$N2_BRIDGE_HOST_PID" "$host_net" \
	socat "UNIX-LISTEN:$N2_APISERVER_SOCK,fork,unlink-early,mode=0600" "TCP:127.0.0.1:$APISERVER_PORT" && bridge_state=started
start_bridge "kube-apiserver bridge's node side" "$N2_BRIDGE_NODE_PID" "$node_net" nsenter -t "$npid" -m -n -- \
	socat "TCP-LISTEN:$APISERVER_PORT,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$N2_APISERVER_SOCK" && bridge_state=started
# Listening: socat binds after it started (and exits if it cannot).
for ((i = 0; i < 50; i++)); do
	[ -S "$N2_APISERVER_SOCK" ] && in_node ss -Hltn "src 127.0.0.1:$APISERVER_PORT" | grep -q . && break
	sleep 0.1
done
[ -S "$N2_APISERVER_SOCK" ] && in_node ss -Hltn "src 127.0.0.1:$APISERVER_PORT" | grep -q . ||
	{ tail -n 5 "$N2_BRIDGE_LOG" >&2; die "the kube-apiserver bridge does not listen (log: $N2_BRIDGE_LOG)"; }

# --- the registry bridge and node two's containerd ------------------------------
# The bed's registry listens on the host's $REG_ADDR only; node two's
# containerd pulls from its own, bridged as kube-apiserver is, so the
# images' names and the mirrors' hosts.toml (certs.d) are the host's.
if pid=$(bridge_pid "$N2_REG_BRIDGE_HOST_PID" "$host_net") && [ ! -S "$N2_REGISTRY_SOCK" ]; then
	stop_pid "$pid" "the registry bridge's host side" 5
fi
start_bridge "registry bridge's host side" "$N2_REG_BRIDGE_HOST_PID" "$host_net" \
	socat "UNIX-LISTEN:$N2_REGISTRY_SOCK,fork,unlink-early,mode=0600" "TCP:$REG_ADDR" || true
start_bridge "registry bridge's node side" "$N2_REG_BRIDGE_NODE_PID" "$node_net" nsenter -t "$npid" -m -n -- \
	socat "TCP-LISTEN:${REG_ADDR##*:},bind=${REG_ADDR%:*},fork,reuseaddr" "UNIX-CONNECT:$N2_REGISTRY_SOCK" || true

# --- node one's libvirt over TLS ----------------------------------------------------
# A migration into node one (node two its source) needs node two's
# libvirtd to reach node one's, the host's, at qemu+tls://$HOST_IP/system,
# as node one's reaches node two's. The host's libvirtd, every suite's,
# keeps listening on its Unix socket alone; a socat on the host's side of
# the veth ends TLS with node one's certificate, takes only clients whose
# certificate the bed's CA made (the two nodes'), and hands each
# connection to the host libvirtd's socket. libvirt's TLS transport has
# the server confirm the client's certificate with one byte (1) after the
# handshake, which the Unix socket's protocol has not: the front sends it.
# TLS 1.2: libvirt's client takes the session tickets TLS 1.3 sends after
# the handshake for that byte, reads nothing, and gives up.
printf '%s\n' '#!/bin/sh' "printf '\\001'" "exec $SOCAT - UNIX-CONNECT:/run/libvirt/libvirt-sock" |
	write_file "$N2_RUN/node1-libvirt-tls.sh" 0755
start_bridge "node one's libvirt TLS front" "$N1_LIBVIRT_TLS_PID" "$host_net" \
	socat "OPENSSL-LISTEN:16514,bind=$HOST_IP,fork,reuseaddr,cert=$PKI_DIR/node1/servercert.pem,key=$PKI_DIR/node1/serverkey.pem,cafile=$CA_DIR/cacert.pem,verify=1,openssl-max-proto-version=TLS1.2" \
	"EXEC:$N2_RUN/node1-libvirt-tls.sh" || true

# The host containerd's config (up.sh) with node two's root, state (its
# socket, shims, NRI), runc root, opt dir and CNI config.
[ -s "$CTD_CONFIG" ] || die "$CTD_CONFIG is missing: run test/bed/up.sh (make bed) first"
sed -e "s|\"$CTD_ROOT\"|\"$N2_CTD_ROOT\"|; s|\"$CTD_STATE|\"$N2_CTD_STATE|g" \
	-e "s|\"$RUNC_ROOT\"|\"$N2_RUN/runc\"|g; s|\"$LIB_DIR/opt\"|\"$N2_LIB/opt\"|" \
	-e "s|\"$CNI_CONF_DIR\"|\"$N2_CNI_CONF_DIR\"|; s|written by test/bed/up.sh|node two's, written by test/bed/node2-up.sh|" \
	"$CTD_CONFIG" | write_file "$N2_CTD_CONFIG"
ctd_state=running
if ! ctd_pid=$(node_daemon "$N2_CTD_PID" "$BIN/containerd"); then
	mkdir -p "$N2_CTD_ROOT"
	# nsenter execs (no new pid namespace): $! is containerd's pid.
	(cd / && exec env -i PATH="$DAEMON_PATH" HOME=/root setsid nsenter -t "$npid" -m -n -- \
		"$BIN/containerd" --config "$N2_CTD_CONFIG" </dev/null >>"$N2_CTD_LOG" 2>&1) &
	ctd_pid=$!
	echo "$ctd_pid" >"$N2_CTD_PID"
	ctd_state=started
fi
n2_crictl() { "$BIN/crictl" --runtime-endpoint "unix://$N2_CTD_SOCK" --image-endpoint "unix://$N2_CTD_SOCK" --timeout 10s "$@"; }
for ((i = 0; i < 300; i++)); do
	n2_crictl info >/dev/null 2>&1 && break
	kill -0 "$ctd_pid" 2>/dev/null || break
	sleep 0.1
done
n2_crictl info >/dev/null 2>&1 || { tail -n 30 "$N2_CTD_LOG" >&2; die "node two's containerd (pid $ctd_pid) does not answer (log: $N2_CTD_LOG)"; }

echo "node2-up: node two (pid $npid) $node_state: libvirtd $libvirtd_state at $NODE_URI (client certs ?pkipath=$PKI_DIR/node1 or node2), containerd $ctd_state (unix://$N2_CTD_SOCK), veth $VETH $HOST_IP <-> eth0 $NODE_IP, pods $N2_SUBNET $N2_SUBNET6 (CNI $N2_CNI_CONF_DIR), kube-apiserver bridge $bridge_state (node two's 127.0.0.1:$APISERVER_PORT), registry bridge (node two's $REG_ADDR) ($((SECONDS - start))s)"
