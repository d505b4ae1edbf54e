#!/usr/bin/env bash
# Stops the test bed cluster's kube-apiserver and etcd and removes etcd's
# data (the certificates are kept). Idempotent; prints one summary line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../bed/lib.sh
source "$here/../bed/lib.sh"
# shellcheck source=lib.sh
source "$here/lib.sh"
need_root
stopped=()
for d in kube-apiserver:$APISERVER_PID etcd:$ETCD_PID; do
	name=${d%%:*} pidfile=${d#*:}
	[ -s "$pidfile" ] || continue
	pid=$(<"$pidfile")
	if [[ $pid =~ ^[0-9]+$ ]] && [[ "$(exe_of "$pid")" == */$name ]]; then
		stop_pid "$pid" "$name" 20
		stopped+=("$name")
	fi
	rm -f "$pidfile"
done
rm -rf "$ETCD_DATA"
echo "cluster: down${stopped:+ (stopped ${stopped[*]})}"
