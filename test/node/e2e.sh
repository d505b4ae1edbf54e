#!/usr/bin/env bash
# make e2e-node: boots the test node once (test/node/up.sh; the disk built
# or taken from the cache), then, on it:
#   1. TestNode (test/e2e/node_test.go): crimux through crictl under systemd;
#   2. the cluster's VM scenarios: the test bed cluster started
#      (test/cluster/up.sh), the node joined with kubelet as a systemd unit
#      (test/node/kubelet.sh), TestNodeKubelet (node_kubelet_test.go),
#      kubelet stopped;
#   3. critest, the whole suite, through crimux (and directly against the
#      node's containerd when a spec fails there: test/node/critest.sh).
# CRIMUX_E2E_SLOW (a number, default 1) stretches the tests' deadlines on
# the node's VMs, and go test's timeouts with them: test/all.sh sets it
# while the host's suites share the cores. CRIMUX_NODE_CRITEST_AFTER, a
# file, makes critest wait until it exists: test/all.sh points it at the
# host suite after which the host lane needs little CPU.
# It always stops the node and the cluster, and prints last
#   node: cgroup v2, systemd driver, kubelet: N passed, M failed, K skipped
# (the steps of TestNode and TestNodeKubelet) after critest's counts in the
# node and on the host (the host's from make critest, when it ran). Exits
# non-zero if any step failed, none ran, or a critest spec failed through
# crimux that passed directly.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# The node joins a control plane of its own (test/cluster/lib.sh), so this
# suite shares no daemon with the host's suites and may run beside them
# (test/all.sh).
export CLUSTER_INSTANCE=${CLUSTER_INSTANCE:-node}
export CRIMUX_CLUSTER_PKI=/var/lib/crimux-testbed/cluster-$CLUSTER_INSTANCE/pki
export PATH=$PATH:/usr/local/go/bin
GO=${GO:-go}
log=$(mktemp /tmp/crimux-e2e-node.XXXXXX)
critest_out=$(mktemp /tmp/crimux-e2e-node-critest.XXXXXX)
finish() {
	"$here/down.sh"
	"$repo/test/cluster/down.sh" >/dev/null 2>&1 || true
	rm -f "$log" "$critest_out"
}
trap finish EXIT
# go_timeout MINUTES: go test's -timeout, stretched as the deadlines are,
# by half at most (a hang must still end well inside CI's 90 minutes).
go_timeout() {
	awk -v m="$1" -v f="${CRIMUX_E2E_SLOW:-1}" 'BEGIN { if (f + 0 < 1) f = 1; if (f > 1.5) f = 1.5; printf "%dm", m * f }'
}
start=$SECONDS
"$here/up.sh"
rc=0
(cd "$repo" && CRIMUX_E2E_NODE=1 "$GO" test -count=1 -v -timeout "$(go_timeout 20)" -run '^TestNode$' ./test/e2e/) 2>&1 | tee "$log" || rc=$?

t_kubelet=$SECONDS
k8s=$("$repo/test/k8s/build.sh")
if "$repo/test/cluster/up.sh" >&2 && "$here/kubelet.sh" >&2; then
	(cd "$repo" && CRIMUX_E2E_NODE=1 CRIMUX_K8S=$k8s "$GO" test -count=1 -v -timeout "$(go_timeout 30)" -run '^TestNodeKubelet$' ./test/e2e/) 2>&1 | tee -a "$log" || rc=$?
else
	echo "e2e-node: the node did not join the cluster" >&2
	echo "--- FAIL: TestNodeKubelet/joining the cluster" >>"$log"
fi
"$here/kubelet.sh" --stop >&2 || true
"$repo/test/cluster/down.sh" >&2 || true
echo "e2e-node: the kubelet scenarios took $((SECONDS - t_kubelet))s" >&2
grep 'TIME ' "$log" | sed 's/^ *//' >&2 || true

if [ -n "${CRIMUX_NODE_CRITEST_AFTER:-}" ]; then
	t_wait=$SECONDS
	until [ -e "$CRIMUX_NODE_CRITEST_AFTER" ]; do sleep 5; done
	echo "e2e-node: critest waited $((SECONDS - t_wait))s for $(basename "$CRIMUX_NODE_CRITEST_AFTER")" >&2
fi
critest_rc=0
t_critest=$SECONDS
"$here/critest.sh" >"$critest_out" || critest_rc=$?
echo "e2e-node: critest in the node took $((SECONDS - t_critest))s" >&2
passed=$(grep -cE -- '--- PASS: TestNode(Kubelet)?/' "$log" || true)
failed=$(grep -cE -- '--- FAIL: TestNode(Kubelet)?/' "$log" || true)
skipped=$(grep -cE -- '--- SKIP: TestNode(Kubelet)?/' "$log" || true)
# A step cut by go test's -timeout prints no FAIL line of its own.
if grep -q '^panic: test timed out' "$log"; then
	failed=$((failed + 1))
	echo "e2e-node: a step ran past go test's timeout: $(grep -m1 -A2 '^panic: test timed out' "$log" | tr '\n' ' ')" >&2
fi
"$here/down.sh"
echo "e2e-node: $((SECONDS - start))s in all" >&2
host=/run/crimux-testbed/critest-crimux.summary
if [ -s "$host" ]; then
	sed 's/^critest crimux:/critest host crimux:/' "$host"
fi
cat "$critest_out"
echo "node: cgroup v2, systemd driver, kubelet: $passed passed, $failed failed, $skipped skipped"
[ "$critest_rc" = 0 ] || echo "e2e-node: critest in the node failed ($critest_rc): a spec failed through crimux that passed directly, or critest did not finish" >&2
[ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ] && [ "$critest_rc" = 0 ]
