#!/usr/bin/env bash
# make e2e-node: boots the test node once (test/node/up.sh; the disk built
# or taken from the cache), runs TestNode (test/e2e/node_test.go) against
# it, then critest in it through crimux (and directly against the node's
# containerd when a spec fails there: test/node/critest.sh, CRITEST_FOCUS),
# always stops it,
# and prints last
#   node: cgroup v2, systemd driver: N passed, M failed
# (the steps of TestNode). Exits non-zero if any step failed, none ran, or
# a critest spec failed through crimux that passed directly.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
GO=${GO:-go}
log=$(mktemp /tmp/crimux-e2e-node.XXXXXX)
trap '"$here/down.sh"; rm -f "$log"' EXIT
start=$SECONDS
"$here/up.sh"
rc=0
(cd "$repo" && CRIMUX_E2E_NODE=1 "$GO" test -count=1 -v -timeout 20m -run '^TestNode$' ./test/e2e/) 2>&1 | tee "$log" || rc=$?
grep 'TIME ' "$log" | sed 's/^ *//' >&2 || true
critest_rc=0
t_critest=$SECONDS
"$here/critest.sh" >&2 || critest_rc=$?
echo "e2e-node: critest in the node took $((SECONDS - t_critest))s" >&2
passed=$(grep -c -- '--- PASS: TestNode/' "$log" || true)
failed=$(grep -c -- '--- FAIL: TestNode/' "$log" || true)
skipped=$(grep -c -- '--- SKIP: TestNode/' "$log" || true)
"$here/down.sh"
trap 'rm -f "$log"' EXIT
echo "e2e-node: $((SECONDS - start))s in all" >&2
echo "node: cgroup v2, systemd driver: $passed passed, $failed failed, $skipped skipped"
[ "$critest_rc" = 0 ] || echo "e2e-node: critest in the node failed ($critest_rc): a spec failed through crimux that passed directly, or critest did not finish; logs were in $NODE_RUN/critest-*.log" >&2
[ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ] && [ "$critest_rc" = 0 ]
