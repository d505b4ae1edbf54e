#!/usr/bin/env bash
# Starts the test bed's one-node cluster control plane on loopback: etcd
# (test/k8s/etcd) and kube-apiserver (v1.37, Node,RBAC authorization,
# NodeRestriction), with certificates made here (test/cluster/pki). Applies
# the RuntimeClass "vm" exactly as systemd/runtimeclass-vm.yaml ships it,
# the node agent's RBAC and admission policy as systemd/ ships them, and
# this directory's RBAC (kube-apiserver → kubelet).
# The kubelet is not started here: each e2e test starts its own, against
# its own crimux, and it registers as node $CLUSTER_NODE ($NODE2_NAME in
# the bed's node two, test/bed/node2-up.sh). No scheduler or
# controller manager: pods name their node. Idempotent: a running control
# plane is kept, a missing part started again. Prints one summary line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../bed/lib.sh
source "$here/../bed/lib.sh"
# shellcheck source=lib.sh
source "$here/lib.sh"
need_root
start=$SECONDS
k8s=$("$REPO_ROOT/test/k8s/build.sh")
mkdir -p "$RUN_DIR" "$CLUSTER_DIR"

kubectl_admin() {
	"$k8s/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout 20s "$@"
}

apiserver_ready() {
	kubectl_admin get --raw /readyz >/dev/null 2>&1
}

# wait_for NAME SECONDS PIDFILE CHECK...: waits until CHECK succeeds, failing
# early with the log's tail if the process dies.
wait_for() {
	local name=$1 secs=$2 pidfile=$3 log=$4 i
	shift 4
	for ((i = 0; i < secs * 2; i++)); do
		"$@" && return 0
		if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			tail -n 30 "$log" >&2
			die "$name exited"
		fi
		sleep 0.5
	done
	tail -n 30 "$log" >&2
	die "$name not ready after ${secs}s"
}

# Each part is started only if it is not running: a test that stopped
# kube-apiserver runs this again to bring it back on the same etcd.
# Certificates of an older bed (without the node VM's or node two's) are
# made again, with a control plane that serves them.
if [ ! -s "$CLUSTER_PKI/$NODE_VM_NAME/kubelet.kubeconfig" ] || [ ! -s "$CLUSTER_PKI/$NODE2_NAME/kubelet.kubeconfig" ]; then
	"$here/down.sh" >/dev/null
	rm -rf "$CLUSTER_PKI"
	quiet pki go run "$REPO_ROOT/test/cluster/pki" -dir "$CLUSTER_PKI" -node "$CLUSTER_NODE" -server "$APISERVER_URL" \
		-other-node "$NODE_VM_NAME=$NODE_VM_APISERVER" -other-node "$NODE2_NAME=$NODE2_APISERVER"
fi

started=()
if ! pid_running "$ETCD_PID" "$k8s/etcd" >/dev/null; then
	"$here/down.sh" >/dev/null # an apiserver without its etcd, etcd's old data
	rm -rf "$ETCD_DATA"
	nohup "$k8s/etcd" --data-dir "$ETCD_DATA" --listen-client-url "$ETCD_URL" --listen-peer-url "$ETCD_PEER_URL" \
		>"$ETCD_LOG" 2>&1 </dev/null &
	echo $! >"$ETCD_PID"
	etcd_ready() { grep -q 'etcd: serving' "$ETCD_LOG"; }
	wait_for etcd 60 "$ETCD_PID" "$ETCD_LOG" etcd_ready
	started+=(etcd)
fi

if ! pid_running "$APISERVER_PID" "$k8s/kube-apiserver" >/dev/null; then
	p=$CLUSTER_PKI
	# Loopback only: kube-apiserver refuses to advertise 127.0.0.1 as the
	# endpoints of the "kubernetes" Service, which nothing here uses, so
	# its endpoint reconciler is off.
	nohup nice -n 5 "$k8s/kube-apiserver" \
		--etcd-servers "$ETCD_URL" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
		--client-ca-file "$p/ca.crt" \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP,Hostname \
		--endpoint-reconciler-type none --profiling=false --v=1 \
		>>"$APISERVER_LOG" 2>&1 </dev/null &
	echo $! >"$APISERVER_PID"
	started+=(kube-apiserver)
fi
wait_for kube-apiserver 180 "$APISERVER_PID" "$APISERVER_LOG" apiserver_ready
if [ ${#started[@]} = 0 ]; then
	echo "cluster: already up ($APISERVER_URL)"
	exit 0
fi

quiet runtimeclass kubectl_admin apply -f "$REPO_ROOT/systemd/runtimeclass-vm.yaml"
quiet rbac kubectl_admin apply -f "$here/rbac.yaml" \
	-f "$REPO_ROOT/systemd/crimux-node-agent-rbac.yaml" -f "$REPO_ROOT/systemd/crimux-node-agent-policy.yaml"
echo "cluster: started ${started[*]} in $((SECONDS - start))s; kube-apiserver at $APISERVER_URL (kubeconfig $ADMIN_KUBECONFIG)"
