# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this
# Common settings and helpers of the crimux test bed scripts (sourced).
# Paths and names here are a contract with the rest of the project: see README.md.

TESTBED=${TESTBED:-/opt/crimux-testbed}
BIN=$TESTBED/bin
CACHE=$TESTBED/cache
IMAGES=$TESTBED/images

CONTAINERD_VERSION=v2.4.2
CRITOOLS_VERSION=v1.37.0
# The CNI plugins, built from the module proxy: CNI 1.1 (GC in host-local,
# STATUS in bridge) came after Debian's 1.1.1, which speaks CNI 1.0 only.
CNI_PLUGINS_MODULE=github.com/containernetworking/plugins
CNI_PLUGINS_VERSION=v1.10.0
# bandwidth: the pods' kubernetes.io/{ingress,egress}-bandwidth (its
# capability, chained last as in Kubernetes' reference configs).
CNI_PLUGINS=(main/bridge ipam/host-local meta/portmap meta/bandwidth main/loopback)

RUN_DIR=/run/crimux-testbed
ETC_DIR=/etc/crimux-testbed
LIB_DIR=/var/lib/crimux-testbed

CTD_ROOT=$LIB_DIR/containerd
CTD_STATE=$RUN_DIR/containerd
CTD_SOCK=$CTD_STATE/containerd.sock
CTD_ENDPOINT=unix://$CTD_SOCK
CTD_PID=$RUN_DIR/containerd.pid
CTD_LOG=$RUN_DIR/containerd.log
CTD_CONFIG=$ETC_DIR/containerd/config.toml
CTD_CONFIG_HASH=$RUN_DIR/containerd.config.sha256
CTD_CERTS_D=$ETC_DIR/containerd/certs.d
CTD_NRI_DIR=$CTD_STATE/nri
CTD_SHIM_SOCKETS=$CTD_STATE/s # at most 42 characters (containerd limit)
RUNC_ROOT=$RUN_DIR/runc

CNI_CONF_DIR=$ETC_DIR/cni/net.d
# /opt/cni/bin: the first of crimux's default cni_bin_dirs (and
# containerd's default), so every crimux on this host finds these plugins.
CNI_BIN_DIR=/opt/cni/bin
CNI_DATA_DIR=$LIB_DIR/cni/networks
CNI_NETWORK=crimux-testbed
BRIDGE=crimuxbr0
SUBNET=10.88.77.0/24
# The pod network is dual stack: every pod (container or VM) gets an
# address of each family, IPv4 first (the pod IP, as containerd picks).
SUBNET6=fd00:88:77::/64

# BED_INSTANCE=b: a second containerd and pod network beside the
# default ones, for test/all.sh's second host lane (suites whose kubelets
# would take the default containerd's pods for orphans and remove them):
# its own root, state, socket, runc root and CNI network (bridge crimuxbr1,
# 10.88.76.0/24, its own IPAM data). The registry, the caches, libvirtd
# and the mirrors' certs.d are the default bed's.
BED_INSTANCE=${BED_INSTANCE:-}
case $BED_INSTANCE in
"") ;;
b)
	CTD_ROOT=$LIB_DIR/containerd-b
	CTD_STATE=$RUN_DIR/containerd-b
	CTD_SOCK=$CTD_STATE/containerd.sock
	CTD_ENDPOINT=unix://$CTD_SOCK
	CTD_PID=$RUN_DIR/containerd-b.pid
	CTD_LOG=$RUN_DIR/containerd-b.log
	CTD_CONFIG=$ETC_DIR/containerd-b/config.toml
	CTD_CONFIG_HASH=$RUN_DIR/containerd-b.config.sha256
	CTD_NRI_DIR=$CTD_STATE/nri
	CTD_SHIM_SOCKETS=$CTD_STATE/s
	RUNC_ROOT=$RUN_DIR/runc-b
	CNI_CONF_DIR=$ETC_DIR/cni-b/net.d
	CNI_DATA_DIR=$LIB_DIR/cni-b/networks
	CNI_NETWORK=crimux-testbed-b
	BRIDGE=crimuxbr1
	SUBNET=10.88.76.0/24
	SUBNET6=fd00:88:76::/64
	;;
*)
	echo "test/bed: BED_INSTANCE is \"\" or b, not $BED_INSTANCE" >&2
	exit 1
	;;
esac
# containerd's plugins' opt dir, of each instance.
CTD_OPT=$LIB_DIR/opt${BED_INSTANCE:+-$BED_INSTANCE}

REG_ADDR=127.0.0.1:5117
REG_BIN=$BIN/crimux-test-registry
REG_PID=$RUN_DIR/registry.pid
REG_LOG=$RUN_DIR/registry.log

IP_FORWARD_SAVED=$RUN_DIR/ip_forward${BED_INSTANCE:+-$BED_INSTANCE}.saved
# The bridge plugin turns IPv6 forwarding on for the IPv6 gateway.
IP6_FORWARD_SAVED=$RUN_DIR/ip6_forward${BED_INSTANCE:+-$BED_INSTANCE}.saved

# Upstream registries whose images the test bed serves (through mirrors to
# the local registry).
MIRRORED_HOSTS=(registry.k8s.io k8s.gcr.io gcr.io docker.io)

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# A controlled environment for everything we start.
DAEMON_PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

SCRIPT=$(basename "$0" .sh)

die() {
	echo "$SCRIPT: error: $*" >&2
	exit 1
}

warn() {
	echo "$SCRIPT: warning: $*" >&2
}

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root"
}

# quiet LOGNAME CMD...: runs CMD with its output in a log file; prints the
# log's tail and fails if CMD fails.
quiet() {
	local name=$1
	shift
	local log
	log=$(mktemp "/tmp/crimux-testbed-$name.XXXXXX")
	local rc=0
	"$@" >"$log" 2>&1 || rc=$?
	if [ "$rc" = 0 ]; then
		rm -f "$log"
		return 0
	fi
	echo "$SCRIPT: '$*' failed (exit $rc); last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit "$rc"
}

# exe_of PID: the executable of a live process ("" if none).
exe_of() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 0
	echo "${exe% (deleted)}"
}

# pid_running PIDFILE EXE: prints the pid if PIDFILE names a live process
# running EXE.
pid_running() {
	local pid
	[ -s "$1" ] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[ "$(exe_of "$pid")" = "$2" ] || return 1
	echo "$pid"
}

# stop_pid PID NAME [SECONDS]: SIGTERM, wait, then SIGKILL.
stop_pid() {
	local pid=$1 name=$2 wait=${3:-15} i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < wait * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	warn "$name (pid $pid) did not stop in ${wait}s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

crictl_ctd() {
	"$BIN/crictl" --runtime-endpoint "$CTD_ENDPOINT" --image-endpoint "$CTD_ENDPOINT" --timeout 10s "$@"
}

containerd_answers() {
	[ -S "$CTD_SOCK" ] && crictl_ctd version >/dev/null 2>&1
}

# registry_answers: GET /v2/ on the test registry, with bash's /dev/tcp.
registry_answers() {
	(
		line=""
		exec 3<>"/dev/tcp/${REG_ADDR%:*}/${REG_ADDR##*:}" || exit 1
		printf 'GET /v2/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$REG_ADDR" >&3
		IFS= read -r -t 5 line <&3 || exit 1
		[[ $line == "HTTP/1."?" 200"* ]]
	) 2>/dev/null
}

# cni_conflist NAME BRIDGE SUBNET SUBNET6 DATA_DIR prints the test bed's
# CNI network config: a bridge with host-local IPAM of both families,
# portmap and bandwidth (up.sh's for the host, node2-up.sh's for node
# two: its own name, bridge, subnets and IPAM data).
cni_conflist() {
	cat <<EOF
{
  "cniVersion": "1.1.0",
  "name": "$1",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$2",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$3" }], [{ "subnet": "$4" }]],
        "routes": [{ "dst": "0.0.0.0/0" }, { "dst": "::/0" }],
        "dataDir": "$5"
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    },
    {
      "type": "bandwidth",
      "capabilities": { "bandwidth": true }
    }
  ]
}
EOF
}
