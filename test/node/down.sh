#!/usr/bin/env bash
# Stops the test node's qemu and removes its run directory (the overlay,
# the serial log, the key copy) and its tap: nothing is left on the host. The cached
# disk stays.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
if node_running; then
	pid=$(cat "$NODE_PID")
	kill "$pid"
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
fi
if [ "${KEEP_LOG:-}" = 1 ] && [ -f "$NODE_SERIAL" ]; then cp "$NODE_SERIAL" /tmp/crimux-node-serial.log; fi
ip link del "$NODE_TAP" 2>/dev/null || true
rm -rf "$NODE_RUN"
