# shellcheck shell=bash disable=SC2034 # sourced by test/node/*.sh
# Where the booted test node lives on the host, and how to reach it.
TESTBED=${TESTBED:-/opt/crimux-testbed}
NODE_RUN=${NODE_RUN:-/run/crimux-node}
# The host port forwarded to the node's sshd (qemu user-mode networking).
NODE_SSH_PORT=${NODE_SSH_PORT:-2222}
# The node's second NIC, on a tap of the host's: kube-apiserver reaches
# the node's kubelet at NODE_IP (exec, logs, attach, port-forward); the
# host end is NODE_HOST_IP. The first NIC, qemu's user network, carries SSH
# and the way to kube-apiserver (10.0.2.2, the host's loopback).
NODE_TAP=${NODE_TAP:-crimuxnode0}
NODE_HOST_IP=10.89.0.1
NODE_IP=10.89.0.2
NODE_UPLINK_MAC=52:54:00:12:34:56
NODE_CLUSTER_MAC=52:54:00:59:00:02
NODE_PID=$NODE_RUN/qemu.pid
NODE_KEY=$NODE_RUN/id_ed25519
NODE_SERIAL=$NODE_RUN/serial.log
# qemu's monitor (QMP): test/e2e's power cut sends system_reset there.
NODE_QMP=$NODE_RUN/qmp.sock
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

node_ssh_opts=(-i "$NODE_KEY" -p "$NODE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o LogLevel=ERROR -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=20 -o BatchMode=yes)

# node_ssh CMD...: runs CMD (a shell command line) as root in the node.
node_ssh() {
	ssh "${node_ssh_opts[@]}" root@127.0.0.1 "$@"
}

# node_running: the node's qemu runs.
node_running() {
	[ -s "$NODE_PID" ] && kill -0 "$(cat "$NODE_PID")" 2>/dev/null
}
