#!/usr/bin/env bash
# kubelet.sh: joins the booted test node (test/node/up.sh) to the test bed
# cluster (test/cluster/up.sh) as a node operator would: kubelet (the test
# bed's build, test/k8s) to /usr/local/bin, its kubeconfig and the cluster
# CA, a KubeletConfiguration with the systemd cgroup driver, crimux's node
# agent pointed at the cluster (its kubeconfig and node name in
# /etc/crimux/config.toml, then systemctl restart crimux), and kubelet
# started by its unit (the node's kubelet.service with the drop-in crimux's
# release installed). Waits until the node is Ready; prints one line.
#   test/node/kubelet.sh          join and start
#   test/node/kubelet.sh --stop   stop kubelet and forget the node
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../bed/lib.sh
source "$here/../bed/lib.sh"
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"
# shellcheck source=lib.sh
source "$here/lib.sh"
node_running || die "the node is not running (test/node/up.sh)"
k8s=$("$REPO_ROOT/test/k8s/build.sh")
kubectl_admin() { "$k8s/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout 20s "$@"; }

if [ "${1:-}" = --stop ]; then
	node_ssh 'systemctl disable --now kubelet 2>/dev/null; true'
	kubectl_admin delete node "$NODE_VM_NAME" --wait=false >/dev/null 2>&1 || true
	echo "node/kubelet.sh: kubelet stopped"
	exit 0
fi
start=$SECONDS
pki=$CLUSTER_PKI/$NODE_VM_NAME
[ -s "$pki/kubelet.kubeconfig" ] || die "$pki/kubelet.kubeconfig is missing: run test/cluster/up.sh"
node_ssh 'install -d -m 0755 /etc/kubernetes/pki /var/lib/kubelet && cat >/usr/local/bin/kubelet.new &&
	chmod 0755 /usr/local/bin/kubelet.new && mv /usr/local/bin/kubelet.new /usr/local/bin/kubelet' <"$k8s/kubelet"
node_ssh 'cat >/etc/kubernetes/pki/ca.crt' <"$CLUSTER_PKI/ca.crt"
node_ssh 'install -m 0600 /dev/stdin /etc/kubernetes/kubelet.conf' <"$pki/kubelet.kubeconfig"
node_ssh 'install -m 0600 /dev/stdin /etc/crimux/node-agent.kubeconfig' <"$pki/crimux.kubeconfig"
node_ssh "set -e
sed -i -e 's#^kubeconfig = .*#kubeconfig = \"/etc/crimux/node-agent.kubeconfig\"#' \
	-e 's#^node_name = .*#node_name = \"$NODE_VM_NAME\"#' /etc/crimux/config.toml
grep -q '^node_name = \"$NODE_VM_NAME\"' /etc/crimux/config.toml
cat >/var/lib/kubelet/config.yaml <<'EOF2'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failSwapOn: false
readOnlyPort: 0
runtimeRequestTimeout: 10m
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization:
  mode: Webhook
# The node lives minutes, on a small disk: no eviction, no image GC (the
# images cannot be pulled again from outside).
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF2
systemctl restart crimux
systemctl daemon-reload
systemctl enable --now kubelet 2>/dev/null"
for ((i = 0; ; i++)); do
	ready=$(kubectl_admin get node "$NODE_VM_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
	[ "$ready" = True ] && break
	if [ "$i" -ge 120 ]; then
		node_ssh 'systemctl status kubelet --no-pager | tail -n 5; journalctl -u kubelet --no-pager | tail -n 30' >&2 || true
		die "node $NODE_VM_NAME not Ready after 240s (Ready=$ready)"
	fi
	sleep 2
done
echo "node/kubelet.sh: node $NODE_VM_NAME Ready in $((SECONDS - start))s (kubelet $("$k8s/kubelet" --version 2>/dev/null | cut -d' ' -f2), systemd driver)"
