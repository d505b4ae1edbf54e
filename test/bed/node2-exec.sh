#!/usr/bin/env bash
# node2-exec.sh CMD [ARG...]: runs CMD in node two of the test bed (its
# mount and network namespaces, as test/bed/node2-up.sh made them), in the
# caller's working directory, with the caller's environment; exits with
# CMD's status. For tests and people, e.g.
#   test/bed/node2-exec.sh virsh -c qemu:///system list
#   test/bed/node2-exec.sh ip addr
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

# As in node2-up.sh.
N2_RUN=$RUN_DIR/node2
N2_NS_PID=$N2_RUN/ns.pid
N2_NS_NET=$N2_RUN/ns.net
SLEEP=$(readlink -f "$(command -v sleep)")

[ "$#" -gt 0 ] || die "usage: $0 CMD [ARG...]"
npid=$(pid_running "$N2_NS_PID" "$SLEEP") && [ -s "$N2_NS_NET" ] &&
	[ "$(readlink "/proc/$npid/ns/net")" = "$(<"$N2_NS_NET")" ] ||
	die "node two is not up: run test/bed/node2-up.sh (make bed-node2)"
# Entering a mount namespace moves to its root: --wd keeps the caller's
# directory (the same path there, unless it is one node two hides).
exec nsenter -t "$npid" -m -n --wd="$PWD" -- "$@"
