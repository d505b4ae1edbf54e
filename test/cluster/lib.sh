# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this
# The test bed cluster's settings (sourced after test/bed/lib.sh): one etcd
# and one kube-apiserver on loopback, their certificates and data under
# $LIB_DIR/cluster, pids and logs in $RUN_DIR. The e2e tests read the same
# paths (test/e2e/cluster_helpers_test.go).
CLUSTER_DIR=$LIB_DIR/cluster
CLUSTER_PKI=$CLUSTER_DIR/pki
CLUSTER_NODE=crimux-e2e-node
# The cgroup-v2 node VM (test/node), a second node of the cluster: its
# kubelet reaches kube-apiserver through qemu's user network, where
# 10.0.2.2 is this host's loopback.
NODE_VM_NAME=crimux-node
NODE_VM_APISERVER=https://10.0.2.2:16443
# The test bed's node two (test/bed/node2-up.sh), a third node: its
# kubelet and crimux run in node two's namespaces, where node2-up.sh
# forwards 127.0.0.1:16443 to this host's kube-apiserver (through a Unix
# socket), so they use the URL of this host's own.
NODE2_NAME=crimux-e2e-node2
NODE2_APISERVER=https://127.0.0.1:16443
ETCD_DATA=$CLUSTER_DIR/etcd
ETCD_URL=http://127.0.0.1:23790
ETCD_PEER_URL=http://127.0.0.1:23800
ETCD_PID=$RUN_DIR/etcd.pid
ETCD_LOG=$RUN_DIR/etcd.log
APISERVER_PORT=16443
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
APISERVER_PID=$RUN_DIR/kube-apiserver.pid
APISERVER_LOG=$RUN_DIR/kube-apiserver.log
ADMIN_KUBECONFIG=$CLUSTER_PKI/admin.kubeconfig
SERVICE_CIDR=10.96.0.0/16
