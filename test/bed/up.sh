#!/usr/bin/env bash
# Starts the test bed: writes the configs, builds and starts the test
# registry on 127.0.0.1:5117 and a private containerd on
# /run/crimux-testbed/containerd/containerd.sock (inside its own mount
# namespace with shared propagation). Idempotent: whatever already runs and
# answers is left alone. Pulls nothing. Prints one summary line.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
start=$SECONDS

for b in containerd containerd-shim-runc-v2 crictl critest; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run test/bed/install.sh first"
done
[ -s "$IMAGES/images.txt" ] || die "no images in $IMAGES: run test/bed/install.sh first"
RUNC=$(command -v runc) || die "runc is missing: run test/bed/install.sh first"

mkdir -p "$RUN_DIR" "$CTD_ROOT" "$CTD_STATE" "$CTD_NRI_DIR" "$RUNC_ROOT" "$CNI_CONF_DIR" "$CNI_DATA_DIR" \
	"$(dirname "$CTD_CONFIG")" "$CTD_CERTS_D"

# write_file PATH: stdin to PATH, only if the content changed.
write_file() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
	else
		chmod 0644 "$tmp"
		mv -f "$tmp" "$1"
	fi
}

# --- containerd config (version 4, containerd 2.4's own) ----------------------
# Every address is set explicitly: in version 4 the ttrpc, debug and metrics
# servers no longer derive theirs from the gRPC one.
write_file "$CTD_CONFIG" <<EOF
# crimux test bed containerd (written by test/bed/up.sh; edits are overwritten)
version = 4
root = "$CTD_ROOT"
state = "$CTD_STATE"
imports = []
oom_score = 0
# Plugins that cannot work here; disabled to keep the log quiet.
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[debug]
  level = "info"

[plugins.'io.containerd.server.v1.grpc']
  address = "$CTD_SOCK"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "$CTD_SOCK.ttrpc"

[plugins.'io.containerd.server.v1.grpc-tcp']
  address = ""

[plugins.'io.containerd.server.v1.debug']
  address = ""

[plugins.'io.containerd.server.v1.metrics']
  address = ""

[plugins.'io.containerd.internal.v1.opt']
  path = "$CTD_OPT"

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "$CTD_SHIM_SOCKETS"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "$CTD_NRI_DIR/nri.sock"
  plugin_path = "$CTD_NRI_DIR/plugins"
  plugin_config_path = "$CTD_NRI_DIR/conf.d"

[plugins.'io.containerd.transfer.v1.local']
  config_path = "$CTD_CERTS_D"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$CTD_CERTS_D"

[plugins.'io.containerd.cri.v1.runtime']
  # Root lacks CAP_SYS_RESOURCE here: negative oom_score_adj is refused.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$RUNC_ROOT"
        SystemdCgroup = false
    # runc again under a second handler name: the e2e test that adds a
    # runtime to crimux by a config reload runs its pod with it.
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc2]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc2.options]
        BinaryName = "$RUNC"
        Root = "$RUNC_ROOT"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF

# --- registry mirrors: every upstream host is served by the local registry ---
# The mirror entry makes containerd add ?ns=<host>; "server" also points at
# the local registry so that no request ever leaves the machine.
for host in "${MIRRORED_HOSTS[@]}"; do
	mkdir -p "$CTD_CERTS_D/$host"
	write_file "$CTD_CERTS_D/$host/hosts.toml" <<EOF
# crimux test bed: $host is served by the local test registry.
server = "http://$REG_ADDR"

[host."http://$REG_ADDR"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
done
for host in "$REG_ADDR" "localhost:${REG_ADDR##*:}"; do
	mkdir -p "$CTD_CERTS_D/$host"
	write_file "$CTD_CERTS_D/$host/hosts.toml" <<EOF
# crimux test bed: the local test registry, plain HTTP.
server = "http://$REG_ADDR"

[host."http://$REG_ADDR"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
done

# --- CNI ---------------------------------------------------------------------
# CNI 1.1.0: the plugins (install.sh) answer STATUS and GC. containerd
# reads this file live but its bin dir only at start: while a containerd
# runs with an older config (Debian's CNI 1.0 plugins, say), the file
# is left as it is (see the warning below) so its pods keep working.
cni_conflist=$(cni_conflist "$CNI_NETWORK" "$BRIDGE" "$SUBNET" "$SUBNET6" "$CNI_DATA_DIR")

# --- registry ------------------------------------------------------------------
(cd "$REPO_ROOT" && quiet build-registry env CGO_ENABLED=0 go build -trimpath -o "$REG_BIN" ./test/registry)
reg_state=running
if ! reg_pid=$(pid_running "$REG_PID" "$REG_BIN") || ! registry_answers; then
	if [ -n "${reg_pid:-}" ]; then
		warn "registry (pid $reg_pid) does not answer; restarting it"
		stop_pid "$reg_pid" registry 5
	fi
	echo "=== $(date -Is) up.sh: starting registry" >>"$REG_LOG"
	(cd / && exec setsid "$REG_BIN" -addr "$REG_ADDR" -root "$IMAGES" </dev/null >>"$REG_LOG" 2>&1) &
	reg_pid=$!
	echo "$reg_pid" >"$REG_PID"
	for ((i = 0; i < 100; i++)); do
		registry_answers && break
		kill -0 "$reg_pid" 2>/dev/null || { tail -n 20 "$REG_LOG" >&2; die "registry exited"; }
		sleep 0.1
	done
	registry_answers || { tail -n 20 "$REG_LOG" >&2; die "registry does not answer on $REG_ADDR"; }
	reg_state=started
fi

# --- containerd ----------------------------------------------------------------
[ -s "$IP_FORWARD_SAVED" ] || cat /proc/sys/net/ipv4/ip_forward >"$IP_FORWARD_SAVED"
[ -s "$IP6_FORWARD_SAVED" ] || cat /proc/sys/net/ipv6/conf/all/forwarding >"$IP6_FORWARD_SAVED" 2>/dev/null ||
	die "IPv6 is disabled on this host (the bed's pod network is dual stack)"
config_hash=$({ cat "$CTD_CONFIG"; printf '%s\n' "$cni_conflist"; } | sha256sum | cut -d' ' -f1)
ctd_state=running
if ctd_pid=$(pid_running "$CTD_PID" "$BIN/containerd"); then
	if [ "$(cat "$CTD_CONFIG_HASH" 2>/dev/null)" != "$config_hash" ]; then
		warn "containerd (pid $ctd_pid) runs with an older config; run down.sh and up.sh to apply the new one (CNI config left as it is)"
	else
		printf '%s\n' "$cni_conflist" | write_file "$CNI_CONF_DIR/10-$CNI_NETWORK.conflist"
	fi
else
	printf '%s\n' "$cni_conflist" | write_file "$CNI_CONF_DIR/10-$CNI_NETWORK.conflist"
	for port in 12000 12001 12002 12003; do
		if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
			warn "port $port is in use: critest's port-mapping specs need 12000-12003 free"
		fi
	done
	echo "=== $(date -Is) up.sh: starting containerd" >>"$CTD_LOG"
	# unshare (without --fork) execs containerd, so $! is containerd's pid.
	(cd / && exec env -i PATH="$DAEMON_PATH" HOME=/root setsid unshare --mount --propagation shared -- \
		"$BIN/containerd" --config "$CTD_CONFIG" </dev/null >>"$CTD_LOG" 2>&1) &
	ctd_pid=$!
	for ((i = 0; i < 50; i++)); do
		[ "$(exe_of "$ctd_pid")" = "$BIN/containerd" ] && break
		kill -0 "$ctd_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ "$(exe_of "$ctd_pid")" = "$BIN/containerd" ] || { tail -n 30 "$CTD_LOG" >&2; die "containerd did not start"; }
	[ "$(readlink "/proc/$ctd_pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] ||
		die "containerd (pid $ctd_pid) is not in a mount namespace of its own"
	echo "$ctd_pid" >"$CTD_PID"
	echo "$config_hash" >"$CTD_CONFIG_HASH"
	ctd_state=started
fi

# condition_true INFO TYPE: crictl info's status.conditions has TYPE true.
condition_true() {
	tr -d ' \n' <<<"$1" | grep -qE "\"status\":true,\"type\":\"$2\"|\"type\":\"$2\",\"status\":true"
}

# Ready = the CRI answers and reports RuntimeReady and NetworkReady (bounded).
ready=false
for ((i = 0; i < 300; i++)); do
	if info=$(crictl_ctd info 2>/dev/null) &&
		condition_true "$info" RuntimeReady && condition_true "$info" NetworkReady; then
		ready=true
		break
	fi
	kill -0 "$ctd_pid" 2>/dev/null || break
	sleep 0.1
done
$ready || { tail -n 30 "$CTD_LOG" >&2; die "containerd (pid $ctd_pid) is not ready after 30s (log: $CTD_LOG)"; }

# The bridge and its gateway address before any pod: a kubelet on this
# network registers with that address (test/e2e's cluster node), which it
# must find on the host. The bridge plugin takes it as it would have made
# it.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link add "$BRIDGE" type bridge
	ip addr add "${SUBNET%.0/24}.1/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
fi

echo "up: registry $reg_state (pid $reg_pid, http://$REG_ADDR), containerd $ctd_state (pid $ctd_pid, $CTD_ENDPOINT) ($((SECONDS - start))s)"
