#!/usr/bin/env bash
# make test: every suite CI runs, side by side where they share nothing,
# then a table of where the time went.
#
#   packages           the bed's Debian packages (test/bed/install.sh --packages)
#   in the background, from the start:
#     bed              the test bed (install.sh, host-tools, up.sh, libvirt-up.sh)
#     kubernetes       the Kubernetes binaries (test/k8s/build.sh, niced)
#     node-image       the cgroup-v2 node's disk (test/node/build.sh), after bed
#     e2e-node         the node suite (test/node/e2e.sh): a VM with daemons and
#                      a control plane of its own, beside the host lane. Its
#                      VMs are TCG inside TCG: their deadlines are stretched
#                      (CRIMUX_E2E_SLOW=2.5), its scenarios run beside make
#                      e2e (whose tests mostly wait: a third of the cores)
#                      and its critest (the whole of both cores) waits until
#                      the host lane's cluster suite is done, beside kubelet,
#                      chaos and critest, which mostly wait too.
#                      CRIMUX_TEST_NODE_AFTER=1 runs it after the host lane.
#   in the foreground, meanwhile:
#     vet, fmt-check, unit, build
#     the host lane    e2e ... critest (the Makefile's targets), one after
#                      another: they share the bed's containerd, libvirtd and
#                      cluster
#   in the background, after the host lane (CRIMUX_TEST_HOST_B,
#   host_b_lane below):
#     the host-b lane  e2e-cluster, e2e-kubelet, chaos, one after another,
#                      on the bed's second containerd, pod network and
#                      control plane (BED_INSTANCE=b, CLUSTER_INSTANCE=b):
#                      their kubelets take every pod of their containerd
#                      for theirs, and chaos counts the leaks of its
#                      containerd's network. libvirtd is shared: each crimux
#                      keeps to the VMs of its own identity.
#
# Each suite's output is kept in $CRIMUX_TEST_LOGS/<suite>.log (a new
# directory under /tmp unless set); the host lane's is printed as it runs,
# a background suite's when it ends. A suite that fails does not stop the
# others (the lanes finish: one run names every failure); the exit status
# is non-zero if any failed. CRIMUX_TEST_BUDGET (seconds, 2700) is the
# total the table is measured against.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo" || exit 1
export PATH=$PATH:/usr/local/go/bin
export GO=${GO:-go} TESTBED=${TESTBED:-/opt/crimux-testbed}
MAKE=${MAKE:-make}
budget=${CRIMUX_TEST_BUDGET:-2700}
logs=${CRIMUX_TEST_LOGS:-$(mktemp -d /tmp/crimux-test.XXXXXX)}
mkdir -p "$logs"
rm -f "$logs"/*.rc "$logs"/*.log "$logs/table"
t0=$SECONDS
echo "test/all.sh: logs in $logs"

# The host lanes, each in this order. They run with make -o for what was
# made once before them (build, bed, host-tools).
host_lane=(e2e e2e-migrate e2e-guest e2e-guest-instant critest)
host_b_lane=(e2e-cluster e2e-kubelet chaos)
# The node's critest starts once this host suite ended.
node_critest_after=e2e-cluster
made=(-o build -o bed -o host-tools)

stamp() {
	local line
	while IFS= read -r line || [ -n "$line" ]; do
		printf '%(%H:%M:%S)T %s\n' -1 "$line"
	done
}

# suite NAME LANE CMD...: runs CMD, its output stamped into NAME.log, and
# writes its row of the table and NAME.rc (what await waits for).
suite() {
	local name=$1 lane=$2 s=$SECONDS rc
	shift 2
	"$@" </dev/null 2>&1 | stamp >"$logs/$name.log"
	rc=${PIPESTATUS[0]}
	finish "$name" "$lane" "$s" "$rc"
	return "$rc"
}

# live NAME LANE CMD...: suite, with the output printed as it comes.
live() {
	local name=$1 lane=$2 s=$SECONDS rc
	shift 2
	echo "=== suite $name"
	"$@" </dev/null 2>&1 | tee "$logs/$name.log"
	rc=${PIPESTATUS[0]}
	finish "$name" "$lane" "$s" "$rc"
	return "$rc"
}

finish() {
	local name=$1 lane=$2 s=$3 rc=$4
	printf '%s %s %d %d %d\n' "$name" "$lane" $((s - t0)) $((SECONDS - s)) "$rc" >>"$logs/table"
	echo "$rc" >"$logs/$name.rc.new" && mv "$logs/$name.rc.new" "$logs/$name.rc"
}

# skipped NAME LANE WHY: a suite not run because what it needs failed.
skipped() {
	echo "test/all.sh: $1 not run: $3" >"$logs/$1.log"
	printf '%s %s %d 0 skip\n' "$1" "$2" $((SECONDS - t0)) >>"$logs/table"
	echo 125 >"$logs/$1.rc"
}

# await NAME: waits for a suite of another lane; its exit status.
await() {
	until [ -s "$logs/$1.rc" ]; do sleep 2; done
	return "$(cat "$logs/$1.rc")"
}

# show NAME: a background suite's output, once it ended.
show() {
	echo "=== suite $1 (in the background; its output as it ended)"
	cat "$logs/$1.log"
}

bed() {
	./test/bed/install.sh && $MAKE -s host-tools && ./test/bed/up.sh && BED_INSTANCE=b ./test/bed/up.sh &&
		./test/bed/libvirt-up.sh
}

# serial_tests_done: make e2e's tests that kill the bed's daemons ended
# (go test -v resumed its first parallel test, or make e2e ended).
serial_tests_done() {
	until grep -q '^=== CONT' "$logs/e2e.log" 2>/dev/null || [ -s "$logs/e2e.rc" ]; do sleep 2; done
}

# The second host lane (BED_INSTANCE=b) starts, by CRIMUX_TEST_HOST_B:
#   after          (the default) once the whole first lane ended.
#   after-migrate  once the first lane's migration suite ended: the rest
#                  of the first lane (the guest suites) and the node's
#                  kubelet scenarios then ran twice as long, and the
#                  node's guest had not answered 20 minutes after its
#                  power cut (docs/testing.md).
#   beside         once make e2e's serial tests (those that kill the
#                  bed's daemons) are done: the migration steps, timed for
#                  a quieter host, missed their minute.
host_b_lane() {
	case ${CRIMUX_TEST_HOST_B:-after} in
	after-migrate) await e2e-migrate ;;
	beside) serial_tests_done ;;
	*) await host-lane ;;
	esac
	local s
	for s in "${host_b_lane[@]}"; do
		suite "$s" host-b $MAKE "${made[@]}" BED_INSTANCE=b "$s"
	done
	echo 0 >"$logs/host-b-lane.rc"
}

# The node lane: its disk once the bed's binaries are there, then its
# suite (which asks test/k8s/build.sh for kubelet, waiting for the
# background build if it still runs).
node_lane() {
	if ! await bed; then
		skipped node-image node "the bed failed"
		skipped e2e-node node "the bed failed"
		return 1
	fi
	suite node-image node ./test/node/build.sh || { skipped e2e-node node "node-image failed"; return 1; }
	if [ "${CRIMUX_TEST_NODE_AFTER:-}" = 1 ]; then
		await host-lane
		suite e2e-node node ./test/node/e2e.sh
		return
	fi
	CRIMUX_E2E_SLOW=${CRIMUX_E2E_SLOW:-2.5} CRIMUX_NODE_CRITEST_AFTER=$logs/$node_critest_after.rc \
		suite e2e-node node ./test/node/e2e.sh
}

summary() {
	local total=$((SECONDS - t0)) failed
	echo
	echo "test/all.sh: time table (start and wall time in seconds from the start; lane bg = built beside the rest)"
	printf '  %-18s %-6s %6s %6s  %s\n' suite lane start wall result
	sort -k3,3n "$logs/table" | while read -r name lane start wall rc; do
		case $rc in
		0) rc=ok ;;
		skip) rc="not run" ;;
		*) rc="FAILED ($rc)" ;;
		esac
		printf '  %-18s %-6s %6d %6d  %s\n' "$name" "$lane" "$start" "$wall" "$rc"
	done
	for lane in fg host host-b bg node; do
		awk -v l="$lane" '$2 == l { if (!n++ || $3 < s) s = $3; if ($3 + $4 > e) e = $3 + $4 } END { if (n) printf "  lane %-4s %5ds .. %5ds (%ds)\n", l, s, e, e - s }' "$logs/table"
	done
	printf '  total %ds (%d min %02d s) against a budget of %ds: %s\n' "$total" $((total / 60)) $((total % 60)) "$budget" \
		"$([ "$total" -le "$budget" ] && echo within || echo "OVER by $((total - budget))s")"
	failed=$(awk '$5 != 0 { print $1 }' "$logs/table" | tr '\n' ' ')
	[ -f /run/crimux-testbed/critest-crimux.summary ] && sed 's/^critest crimux:/critest host crimux:/' /run/crimux-testbed/critest-crimux.summary
	grep -h -e '^[0-9:]* *critest node' -e '^[0-9:]* *node: cgroup v2' "$logs/e2e-node.log" 2>/dev/null | sed 's/^[0-9:]* //'
	if [ -n "$failed" ]; then
		echo "test/all.sh: FAILED: $failed(logs in $logs)"
		return 1
	fi
	echo "test/all.sh: every suite passed"
}

suite packages fg ./test/bed/install.sh --packages || { cat "$logs/packages.log"; summary; exit 1; }
suite bed bg bed &
suite kubernetes bg ./test/k8s/build.sh &
node_lane &

rc=0
live vet fg $MAKE -s vet || rc=1
live fmt-check fg $MAKE -s fmt-check || rc=1
live unit fg $MAKE -s unit || rc=1
live build fg $MAKE -s build || rc=1

await bed
bed_rc=$?
show bed
if [ "$bed_rc" != 0 ]; then
	for s in "${host_lane[@]}"; do skipped "$s" host "the bed failed"; done
	for s in "${host_b_lane[@]}"; do skipped "$s" host-b "the bed failed"; done
	echo 0 >"$logs/host-b-lane.rc"
else
	host_b_lane &
	for s in "${host_lane[@]}"; do
		live "$s" host $MAKE "${made[@]}" "$s" || rc=1
	done
fi
# The node suite (CRIMUX_TEST_NODE_AFTER=1) and host-b lane
# (CRIMUX_TEST_HOST_B=after) wait for this.
echo 0 >"$logs/host-lane.rc"
await host-b-lane
for s in "${host_b_lane[@]}" kubernetes node-image e2e-node; do
	await "$s"
	show "$s"
done
wait
summary || rc=1
exit "$rc"
