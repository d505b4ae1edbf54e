#!/usr/bin/env bash
# make e2e-node: boots the test node (test/node/up.sh; the disk built or
# taken from the cache), runs TestNode (test/e2e/node_test.go) against it,
# always stops it, and prints last
#   node: cgroup v2, systemd driver: N passed, M failed
# (the steps of TestNode). Exits non-zero if any step failed or none ran.
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
passed=$(grep -c -- '--- PASS: TestNode/' "$log" || true)
failed=$(grep -c -- '--- FAIL: TestNode/' "$log" || true)
skipped=$(grep -c -- '--- SKIP: TestNode/' "$log" || true)
"$here/down.sh"
trap 'rm -f "$log"' EXIT
echo "e2e-node: $((SECONDS - start))s in all" >&2
echo "node: cgroup v2, systemd driver: $passed passed, $failed failed, $skipped skipped"
[ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
