#!/usr/bin/env bash
# dist.sh OUT VERSION BIN: lays out a crimux release in OUT/crimux-VERSION-linux-amd64/
# from the binaries in BIN and the repository's systemd/ files, and packs it
# as OUT/crimux-VERSION-linux-amd64.tar.gz (reproducible: sorted, owned by
# root, dated by the commit) with its SHA256SUMS inside and beside it.
#
#   bin/crimux, bin/crimuxctl          static (CGO_ENABLED=0)
#   bin/kubectl-crimux                 static: kubectl's plugin (kubectl crimux migrate)
#   bin/crimux-controller              static: the cluster's controller (its image's entrypoint)
#   lib/crimux/crimux-qemu-wrapper     every domain's <emulator>
#   systemd/crimux.service             the unit (install.sh sets its paths)
#   systemd/kubelet-crimux.conf        kubelet's drop-in: endpoints, order
#   share/crimux/*.yaml                RuntimeClass vm, node agent RBAC + policy
#   share/crimux/controller/           the VMMigration CRD, crimux-controller (kubectl apply -k)
#   install.sh, VERSION, SHA256SUMS
set -euo pipefail
out=$1 version=$2 bin=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
name=crimux-$version-linux-amd64
tree=$out/$name
rm -rf "$tree" && mkdir -p "$tree"/{bin,lib/crimux,systemd,share/crimux/controller}
install -m 0755 "$bin/crimux" "$bin/crimuxctl" "$bin/kubectl-crimux" "$bin/crimux-controller" "$tree/bin/"
install -m 0755 "$bin/crimux-qemu-wrapper" "$tree/lib/crimux/"
install -m 0644 "$repo/systemd/crimux.service" "$repo/systemd/kubelet-crimux.conf" "$tree/systemd/"
install -m 0644 "$repo"/systemd/{runtimeclass-vm,crimux-node-agent-rbac,crimux-node-agent-policy}.yaml "$tree/share/crimux/"
install -m 0644 "$repo"/deploy/controller/*.yaml "$tree/share/crimux/controller/"
install -m 0755 "$repo/hack/install.sh" "$tree/install.sh"
echo "$version" >"$tree/VERSION"
(cd "$tree" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's#^\./##' | xargs sha256sum >SHA256SUMS)
mtime=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)
tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - "$name" | gzip -n >"$out/$name.tar.gz"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
