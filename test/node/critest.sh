#!/usr/bin/env bash
# critest.sh: the CRI validation suite (the test bed's critest, cri-tools
# v1.37.0) inside the booted test node (test/node/up.sh), through crimux,
# then, if a spec failed there (or CRITEST_DIRECT=1), against the node's
# containerd directly on the same specs, to tell crimux's failures from
# the node's.
# The whole suite runs, as on the host (make critest, test/bed/critest.sh:
# every spec but the benchmarks and the pull of a public image by digest,
# which no registry here serves), less one spec containerd's own CI skips
# on the systemd cgroup driver: Container OOM, whose reason containerd
# reports now OOMKilled, now Error there (containerd #12260, #12819; seen
# here directly against the node's containerd too). AppArmor is off in the
# node's kernel (grub.cfg), as on the host, so its specs skip themselves.
# CRITEST_FOCUS narrows it to the specs matching a regexp when one is being
# looked at.
# The specs run CRITEST_PARALLEL (default 4) at once (critest --parallel:
# the test bed's ginkgo CLI is copied next to critest in the node), as on
# the host; CRITEST_PARALLEL=1 runs them serially. The node's 2 TCG vCPUs
# are the limit: the whole suite took 559 s with 4, 739 s serially.
# Prints, last,
#   critest node direct: N passed, M failed, K skipped   (or: not run ...)
#   critest node crimux: N passed, M failed, K skipped
# and fails if a spec fails through crimux that passes directly
# (test/bed/critest-compare.sh). Logs in $NODE_RUN/critest-*.log.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
CRITEST_FOCUS=${CRITEST_FOCUS:-}
CRITEST_PARALLEL=${CRITEST_PARALLEL:-4}
[[ $CRITEST_PARALLEL =~ ^[1-9][0-9]*$ ]] || { echo "node/critest.sh: CRITEST_PARALLEL must be a positive number" >&2; exit 1; }
node_running || { echo "node/critest.sh: the node is not running (test/node/up.sh)" >&2; exit 1; }
[ "$CRITEST_PARALLEL" = 1 ] || [ -x "$TESTBED/bin/ginkgo" ] ||
	{ echo "node/critest.sh: $TESTBED/bin/ginkgo is missing: run test/bed/install.sh" >&2; exit 1; }

# Every test image, and critest itself, into the node; with the ginkgo CLI
# next to it (in PATH there), which critest --parallel runs.
(cd "$TESTBED/images" && tar -cf - --exclude=images.txt .) | node_ssh 'tar -xf - -C /var/lib/crimux-node/images'
node_ssh 'cat >/usr/local/bin/critest && chmod 0755 /usr/local/bin/critest' <"$TESTBED/bin/critest"
if [ "$CRITEST_PARALLEL" != 1 ]; then
	node_ssh 'cat >/usr/local/bin/ginkgo && chmod 0755 /usr/local/bin/ginkgo' <"$TESTBED/bin/ginkgo"
fi
parallel=
[ "$CRITEST_PARALLEL" = 1 ] || parallel=--parallel=$CRITEST_PARALLEL

run() {
	local label=$1 endpoint=$2 start=$SECONDS
	node_ssh "cd /tmp && timeout 1800 critest --runtime-endpoint=$endpoint --image-endpoint=$endpoint $parallel \
		${CRITEST_FOCUS:+--ginkgo.focus='$CRITEST_FOCUS'} --ginkgo.skip='\\[Benchmark\\]' \
		--ginkgo.skip='public image with digest should be pulled and removed' \
		--ginkgo.skip='should terminate with exitCode 137 and reason OOMKilled' --ginkgo.no-color --ginkgo.v" \
		>"$NODE_RUN/critest-$label.log" 2>&1 || true
	local counts passed failed skipped
	counts=$(grep -aoE '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$NODE_RUN/critest-$label.log" | tail -n 1 || true)
	if [ -z "$counts" ]; then
		tail -n 20 "$NODE_RUN/critest-$label.log" >&2
		echo "node/critest.sh: critest $label did not reach its summary" >&2
		exit 1
	fi
	read -r passed _ _ failed _ _ _ _ _ skipped _ <<<"$counts"
	echo "critest node $label: $passed passed, $failed failed, $skipped skipped" | tee "$NODE_RUN/critest-$label.summary" >/dev/null
	echo "node/critest.sh: $label took $((SECONDS - start))s (critest --parallel=$CRITEST_PARALLEL)" >&2
}
run crimux unix:///run/crimux/crimux.sock
# The direct run is the reference for specs that fail through crimux: when
# none does, it is skipped (minutes of CI), unless CRITEST_DIRECT=1.
if [ "${CRITEST_DIRECT:-}" != 1 ] && grep -q ' 0 failed,' "$NODE_RUN/critest-crimux.summary"; then
	echo "critest node direct: not run (no spec failed through crimux; CRITEST_DIRECT=1 runs it)"
	cat "$NODE_RUN/critest-crimux.summary"
	exit 0
fi
run direct unix:///run/containerd/containerd.sock
cat "$NODE_RUN/critest-direct.summary" "$NODE_RUN/critest-crimux.summary"
"$here/../bed/critest-compare.sh" "$NODE_RUN/critest-direct.log" "$NODE_RUN/critest-crimux.log"
