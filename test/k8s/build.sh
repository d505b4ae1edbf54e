#!/usr/bin/env bash
# Builds the test bed's unmodified Kubernetes binaries once per version:
# $TESTBED/k8s/<version>/{kubelet,kube-apiserver,kube-controller-manager,
# kube-scheduler,kubectl,etcd}, from this
# wrapper module (go.mod: k8s.io/kubernetes at a release, its staging
# modules at the matching v0.x releases, etcd's server module, all from
# the Go module proxy; ./etcd is the cluster's etcd). About 12 minutes on
# 2 cores, so the binaries are cached and the build runs niced; they are
# rebuilt only when this module's files or the Go version change (a stamp
# next to them). Prints the directory as its last line, or with an
# argument (kubelet, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd) that binary's path.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTBED=${TESTBED:-/opt/crimux-testbed}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
export PATH=$PATH:/usr/local/go/bin

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
out=$TESTBED/k8s/$version
stamp=$(cd "$here" && { cat go.mod go.sum build.sh etcd/*.go; go version; } | sha256sum | cut -d' ' -f1)
want=${1:-}
# One build at a time: a suite asking while test/all.sh builds in the
# background waits for that build and takes its binaries.
mkdir -p "$TESTBED/k8s"
exec 9>"$TESTBED/k8s/.build.lock"
flock 9

print() {
	if [ -n "$want" ]; then echo "$out/$want"; else echo "$out"; fi
}

if [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
	print
	exit 0
fi

mkdir -p "$out"
rm -rf "$out/.new"
minor=${version#v1.}
minor=${minor%%.*}
# The version stamps kubernetes' own release build sets (hack/lib/version.sh).
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
start=$SECONDS
log=$(mktemp /tmp/crimux-k8s-build.XXXXXX)
# One go build for all six: the packages they share compile once.
if ! (cd "$here" && nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$out/.new/" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./etcd) >"$log" 2>&1; then
	echo "build.sh: kubernetes $version build failed; last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit 1
fi
rm -f "$log"
for b in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do
	mv -f "$out/.new/$b" "$out/$b"
done
rmdir "$out/.new"
echo "$stamp" >"$out/stamp"
echo "build.sh: built kubernetes $version (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd) in $((SECONDS - start))s" >&2
print
