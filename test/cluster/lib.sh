# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this
# The test bed cluster's settings (sourced after test/bed/lib.sh): one etcd
# and one kube-apiserver on loopback, their certificates and data under
# $LIB_DIR/cluster, pids and logs in $RUN_DIR. The e2e tests read the same
# paths (test/e2e/cluster_helpers_test.go; CRIMUX_CLUSTER_PKI names another
# instance's certificates).
#
# CLUSTER_INSTANCE names a control plane of its own beside the default one
# (its directory, pid and log files, and ports 10000 higher for "node",
# 20000 for any other), so that suites that share nothing else need not
# share it either: the cgroup-v2 node's suite (test/node/e2e.sh, instance
# "node") and test/all.sh's second host lane (instance "b", on the bed's
# second containerd) run beside the host's first lane, whose cluster
# suites' outage steps stop and start their kube-apiserver.
CLUSTER_INSTANCE=${CLUSTER_INSTANCE:-}
cluster_suffix=${CLUSTER_INSTANCE:+-$CLUSTER_INSTANCE}
case $CLUSTER_INSTANCE in
"") cluster_port_offset=0 ;;
node) cluster_port_offset=10000 ;;
*) cluster_port_offset=20000 ;;
esac
CLUSTER_DIR=$LIB_DIR/cluster$cluster_suffix
CLUSTER_PKI=$CLUSTER_DIR/pki
CLUSTER_NODE=crimux-e2e-node
# The cgroup-v2 node VM (test/node), a second node of the cluster: its
# kubelet reaches kube-apiserver through qemu's user network, where
# 10.0.2.2 is this host's loopback.
NODE_VM_NAME=crimux-node
NODE_VM_APISERVER=https://10.0.2.2:$((16443 + cluster_port_offset))
# The test bed's node two (test/bed/node2-up.sh), a third node: its
# kubelet and crimux run in node two's namespaces, where node2-up.sh
# forwards 127.0.0.1:16443 to this host's kube-apiserver (through a Unix
# socket), so they use the URL of this host's own.
NODE2_NAME=crimux-e2e-node2
NODE2_APISERVER=https://127.0.0.1:16443
ETCD_DATA=$CLUSTER_DIR/etcd
ETCD_URL=http://127.0.0.1:$((23790 + cluster_port_offset))
ETCD_PEER_URL=http://127.0.0.1:$((23800 + cluster_port_offset))
ETCD_PID=$RUN_DIR/etcd$cluster_suffix.pid
ETCD_LOG=$RUN_DIR/etcd$cluster_suffix.log
APISERVER_PORT=$((16443 + cluster_port_offset))
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
APISERVER_PID=$RUN_DIR/kube-apiserver$cluster_suffix.pid
APISERVER_LOG=$RUN_DIR/kube-apiserver$cluster_suffix.log
ADMIN_KUBECONFIG=$CLUSTER_PKI/admin.kubeconfig
SERVICE_CIDR=10.96.0.0/16
