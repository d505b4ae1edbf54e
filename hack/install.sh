#!/bin/sh
# install.sh: installs a crimux release on a node, from the directory it
# is in (the unpacked tarball of `make dist`, or the staging tree `make
# install` makes). Nothing is fetched; the files are checked against
# SHA256SUMS first. As the Makefile's install, it honours
#   DESTDIR     a root to install into (a node image being built), ""
#   PREFIX      /usr/local: bin/, lib/crimux/, share/crimux/, the unit
#   SYSCONFDIR  /etc: crimux/config.toml (kept if it exists)
#   UNITDIR     $PREFIX/lib/systemd/system
# and installs kubelet's drop-in (kubelet.service.d/20-crimux.conf) under
# $SYSCONFDIR/systemd/system. Then: systemctl daemon-reload && systemctl
# enable --now crimux && systemctl restart kubelet.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}

(cd "$here" && sha256sum --quiet -c SHA256SUMS) || { echo "install.sh: files differ from SHA256SUMS" >&2; exit 1; }

install -d "$DESTDIR$PREFIX/bin" "$DESTDIR$PREFIX/lib/crimux" "$DESTDIR$UNITDIR" \
	"$DESTDIR$PREFIX/share/crimux/controller" "$DESTDIR$SYSCONFDIR/crimux" "$DESTDIR$SYSCONFDIR/systemd/system/kubelet.service.d"
install -m 0755 "$here/bin/crimux" "$here/bin/crimuxctl" "$here/bin/kubectl-crimux" "$DESTDIR$PREFIX/bin/"
install -m 0755 "$here/lib/crimux/crimux-qemu-wrapper" "$DESTDIR$PREFIX/lib/crimux/"
config_flag=""
[ "$SYSCONFDIR" = /etc ] || config_flag=" --config $SYSCONFDIR/crimux/config.toml"
sed -e "s#/usr/local/bin/crimux#$PREFIX/bin/crimux#" -e "s#/etc/crimux/#$SYSCONFDIR/crimux/#g" \
	-e "s#^ExecStart=.*#&$config_flag#" "$here/systemd/crimux.service" >"$DESTDIR$UNITDIR/crimux.service"
chmod 0644 "$DESTDIR$UNITDIR/crimux.service"
install -m 0644 "$here/systemd/kubelet-crimux.conf" "$DESTDIR$SYSCONFDIR/systemd/system/kubelet.service.d/20-crimux.conf"
install -m 0644 "$here"/share/crimux/*.yaml "$DESTDIR$PREFIX/share/crimux/"
install -m 0644 "$here"/share/crimux/controller/*.yaml "$DESTDIR$PREFIX/share/crimux/controller/"
config=$DESTDIR$SYSCONFDIR/crimux/config.toml
if [ -e "$config" ]; then
	echo "kept $config"
else
	"$here/bin/crimux" config default | sed "s#/usr/local/lib/crimux/#$PREFIX/lib/crimux/#" >"$config"
	echo "wrote $config"
fi
echo "installed crimux $(cat "$here/VERSION"); then: systemctl daemon-reload && systemctl enable --now crimux"
