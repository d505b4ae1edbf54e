#!/usr/bin/env bash
# Runs a command in the booted test node as root, over SSH:
#   test/node/run.sh 'systemctl status crimux'
#   test/node/run.sh --get /var/log/x.log /tmp/out/    copies a file or directory out
#   test/node/run.sh --put ./file /root/               copies one in
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
node_running || { echo "node/run.sh: the node is not running (test/node/up.sh)" >&2; exit 1; }
case "${1:-}" in
--get)
	mkdir -p "$3"
	node_ssh "tar -C $(dirname "$2") -cf - $(basename "$2")" | tar -xf - -C "$3"
	;;
--put)
	tar -C "$(dirname "$2")" -cf - "$(basename "$2")" | node_ssh "mkdir -p $3 && tar -xf - -C $3"
	;;
*)
	node_ssh "$@"
	;;
esac
