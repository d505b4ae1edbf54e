#!/usr/bin/env bash
# critest.sh LABEL ENDPOINT
# Runs critest (cri-tools v1.37.0) against ENDPOINT (runtime and image
# service alike), inside the test bed containerd's mount namespace (the
# mount-propagation specs need it), skipping the [Benchmark] specs and the
# spec pinned to an upstream digest. The specs run in parallel,
# CRITEST_PARALLEL (default 4) ginkgo processes at once (critest --parallel,
# through $TESTBED/bin/ginkgo, test/bed/install.sh), as containerd's and
# cri-o's CI run it; ginkgo keeps the [Serial] specs for the end, alone. On
# a 2-core host a run takes about 30 s this way, 85 s serially (4 and 8
# did equally well, 2 took 48 s). CRITEST_PARALLEL=1 runs the specs
# serially. CRITEST_FOCUS narrows the run to the specs matching a regexp.
# Full log: /run/crimux-testbed/critest-LABEL.log. Summary (one line, also
# printed): /run/crimux-testbed/critest-LABEL.summary, as
#   critest LABEL: N passed, M failed, K skipped
# Exit status 0 whatever the specs did; non-zero only if critest could not
# run (or its output has no ginkgo summary).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

[ $# -eq 2 ] || die "usage: critest.sh LABEL ENDPOINT (e.g. critest.sh direct $CTD_ENDPOINT)"
label=$1 endpoint=$2
[[ $label =~ ^[A-Za-z0-9._-]+$ ]] || die "LABEL must match [A-Za-z0-9._-]+"
[[ $endpoint == unix://* ]] || endpoint=unix://$endpoint
[ -S "${endpoint#unix://}" ] || die "no socket at ${endpoint#unix://}"
[ -x "$BIN/critest" ] || die "$BIN/critest is missing: run test/bed/install.sh"
parallel=${CRITEST_PARALLEL:-4}
[[ $parallel =~ ^[1-9][0-9]*$ ]] || die "CRITEST_PARALLEL must be a positive number"
if [ "$parallel" -gt 1 ]; then
	# critest runs the ginkgo CLI from PATH.
	[ -x "$BIN/ginkgo" ] || die "$BIN/ginkgo is missing: run test/bed/install.sh"
	export PATH=$BIN:$PATH
fi
CRITEST_FOCUS=${CRITEST_FOCUS:-}
ctd_pid=$(pid_running "$CTD_PID" "$BIN/containerd") || die "the test bed containerd is not running: run test/bed/up.sh"

log=$RUN_DIR/critest-$label.log
summary_file=$RUN_DIR/critest-$label.summary
rm -f "$summary_file"

# critest creates System V shm segments on the host (ipcmk, HostIpc specs)
# and never removes them: remember what was there.
shm_before=$(awk 'NR > 1 { print $2 }' /proc/sysvipc/shm | sort)

workdir=$(mktemp -d /tmp/crimux-critest.XXXXXX)
trap 'rm -rf "$workdir"' EXIT
start=$SECONDS
{
	echo "=== $(date -Is) critest $CRITOOLS_VERSION, label $label, endpoint $endpoint, containerd pid $ctd_pid, parallel $parallel"
	for port in 12000 12001 12002 12003; do
		if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
			echo "=== warning: port $port is in use (the port-mapping specs need it)"
		fi
	done
} >"$log"
args=(--runtime-endpoint="$endpoint" --image-endpoint="$endpoint"
	${CRITEST_FOCUS:+--ginkgo.focus="$CRITEST_FOCUS"}
	--ginkgo.skip='\[Benchmark\]'
	--ginkgo.skip='public image with digest should be pulled and removed'
	--ginkgo.no-color --ginkgo.v)
if [ "$parallel" -gt 1 ]; then
	args+=(--parallel="$parallel")
fi
rc=0
# TMPDIR: critest --parallel links itself into a temporary directory, which
# it leaves behind.
(cd "$workdir" && TMPDIR=$workdir timeout 3600 nsenter --mount="/proc/$ctd_pid/ns/mnt" -- \
	"$BIN/critest" "${args[@]}") >>"$log" 2>&1 || rc=$?
echo "=== $(date -Is) critest exited with status $rc after $((SECONDS - start))s" >>"$log"

# Remove the segments that appeared during the run and are unused.
while read -r _ shmid _ _ _ _ nattch _; do
	[ "$nattch" = 0 ] || continue
	grep -qx "$shmid" <<<"$shm_before" && continue
	ipcrm -m "$shmid" 2>/dev/null || true
done < <(awk 'NR > 1' /proc/sysvipc/shm)

# Ginkgo's closing line, e.g. "FAIL! -- 105 Passed | 2 Failed | 0 Pending | 35 Skipped".
counts=$(grep -aoE '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$log" | tail -n 1 || true)
if [ -z "$counts" ]; then
	tail -n 30 "$log" >&2
	die "critest did not run to its summary (exit status $rc); full log: $log"
fi
read -r passed _ _ failed _ _ pending _ _ skipped _ <<<"$counts"
line="critest $label: $passed passed, $failed failed, $skipped skipped"
echo "$line" >"$summary_file"
echo "$line"
if [ "$failed" -gt 0 ]; then
	# ginkgo's "Summarizing N Failures" section names each failed spec.
	grep -aE '^\s*\[FAIL\]' "$log" | sed 's/^/  /' >&2 || true
	echo "  (full log: $log)" >&2
fi
if [ "$pending" -gt 0 ]; then
	echo "  ($pending pending specs)" >&2
fi
exit 0
