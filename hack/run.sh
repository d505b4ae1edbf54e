#!/usr/bin/env bash
# run.sh: run crimux on this machine with its default config. It talks to
# the containerd at /run/containerd/containerd.sock when one answers there;
# otherwise it installs and starts the test bed's containerd (test/bed) and
# points crimux at it. Likewise for VMs: when no libvirtd answers at
# qemu:///system, or crimux's qemu wrapper is not installed, it runs
# test/bed/libvirt-up.sh (libvirt and qemu from Debian, qemu.conf without
# libvirt's cgroup handling, the wrapper, virtlogd and libvirtd started).
# Stop with Ctrl-C.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTBED=${TESTBED:-/opt/crimux-testbed}
export TESTBED
SYSTEM=/run/containerd/containerd.sock
endpoint=unix://$SYSTEM
extra=()
crictl=$(command -v crictl || echo "$TESTBED/bin/crictl")
if ! { [ -S "$SYSTEM" ] && [ -x "$crictl" ] && "$crictl" --runtime-endpoint "$endpoint" --timeout 3s version >/dev/null 2>&1; }; then
	echo "run: no containerd answers at $SYSTEM; starting the test bed's containerd"
	"$ROOT/test/bed/install.sh"
	"$ROOT/test/bed/up.sh"
	endpoint=unix:///run/crimux-testbed/containerd/containerd.sock
	# VM pods join the test bed's pod network (the same CNI config).
	extra=(--cni-conf-dir /etc/crimux-testbed/cni/net.d)
fi
WRAPPER=/usr/local/lib/crimux/crimux-qemu-wrapper
if ! { virsh -c qemu:///system version >/dev/null 2>&1 && [ -x "$WRAPPER" ]; }; then
	echo "run: no libvirtd answers at qemu:///system or $WRAPPER is missing; starting the test bed's libvirtd"
	"$ROOT/test/bed/libvirt-up.sh"
fi
[ -x "$ROOT/bin/crimux" ] || (cd "$ROOT" && go build -o bin/crimux ./cmd/crimux)
echo "run: crimux on /run/crimux/crimux.sock in front of $endpoint"
echo "run: try: $crictl --runtime-endpoint unix:///run/crimux/crimux.sock info"
exec "$ROOT/bin/crimux" --containerd-endpoint "$endpoint" "${extra[@]}" "$@"
