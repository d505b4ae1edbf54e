#!/usr/bin/env bash
# critest-both.sh CRIMUX_BIN: run critest against the test bed's containerd
# directly, then through a crimux started in front of the same containerd,
# and print the two summary lines last. Fails if crimux fails a spec that
# passes directly.
set -euo pipefail
CRIMUX_BIN=${1:?usage: critest-both.sh CRIMUX_BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
RUN=/run/crimux-testbed
CONTAINERD=unix://$RUN/containerd/containerd.sock
SOCK=$RUN/crimux.sock
STATE=$(mktemp -d /var/tmp/crimux-critest-state.XXXXXX)

"$HERE/critest.sh" direct "$CONTAINERD"

: > "$RUN/crimux-critest.log"
"$CRIMUX_BIN" --config /dev/null --listen "$SOCK" --state-dir "$STATE" \
	--containerd-endpoint "$CONTAINERD" >"$RUN/crimux-critest.log" 2>&1 &
CRIMUX_PID=$!
cleanup() { kill "$CRIMUX_PID" 2>/dev/null || true; wait "$CRIMUX_PID" 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "crimux did not start:"; cat "$RUN/crimux-critest.log"; exit 1; }

"$HERE/critest.sh" crimux "unix://$SOCK"

# Every spec that passes directly must pass through crimux.
direct_summary=$(cat "$RUN/critest-direct.summary")
crimux_summary=$(cat "$RUN/critest-crimux.summary")
status=0
if ! "$HERE/critest-compare.sh" "$RUN/critest-direct.log" "$RUN/critest-crimux.log"; then
	status=1
fi
echo "$direct_summary"
echo "$crimux_summary"
exit $status
