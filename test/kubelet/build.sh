#!/usr/bin/env bash
# Builds an unmodified kubelet for the kubelet e2e test, once per version:
# $TESTBED/kubelet/<version>/kubelet, from this wrapper module (go.mod:
# k8s.io/kubernetes at a release, its staging modules at the matching v0.x
# releases, all from the Go module proxy). About 5 minutes on 2 cores, so
# the binary is cached and the build runs niced; it is rebuilt only when
# go.mod, go.sum or the Go version change (a stamp next to the binary).
# Prints the binary's path as its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTBED=${TESTBED:-/opt/crimux-testbed}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
export PATH=$PATH:/usr/local/go/bin

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
out=$TESTBED/kubelet/$version
bin=$out/kubelet
stamp=$(cd "$here" && { cat go.mod go.sum; go version; } | sha256sum | cut -d' ' -f1)

if [ -x "$bin" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$out"
minor=${version#v1.}
minor=${minor%%.*}
# The version stamps kubernetes' own release build sets (hack/lib/version.sh).
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
start=$SECONDS
log=$(mktemp /tmp/crimux-kubelet-build.XXXXXX)
if ! (cd "$here" && nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$bin.new" k8s.io/kubernetes/cmd/kubelet) >"$log" 2>&1; then
	echo "build.sh: kubelet $version build failed; last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit 1
fi
rm -f "$log"
mv -f "$bin.new" "$bin"
echo "$stamp" >"$out/stamp"
echo "build.sh: built kubelet $version in $((SECONDS - start))s" >&2
echo "$bin"
