// Package migproxy carries a live migration's data between two nodes.
//
// libvirt migrates peer to peer: the two libvirtds talk over libvirt's own
// TLS, but qemu's migration stream and the NBD stream of the disk copy go
// over unix sockets, one per channel ("mem", "disk"). The target qemu
// listens on its node's sockets; the source qemu connects to the same
// paths on its node. This package joins the two ends, as KubeVirt's
// migration proxy does, so that qemu never holds a key and never listens
// on a node's address:
//
//	source qemu -> unix socket -> Forwarder ==TLS==> Listener -> unix socket -> target qemu
//
// Both ends authenticate with the node's libvirt certificates (LoadTLS):
// only a node of the cluster can reach a migration socket at all, and only
// with the token of a migration the target expects (Listener.Expect).
// The target's sockets are in a directory its qemu owns: the Listener
// carries a stream only to a socket (never through a symlink) that the
// target qemu's uid listens on, so that qemu cannot have crimux write it
// into another process's socket.
//
// Wire format: right after the TLS handshake the source writes one header
// line, "crimux-migration/1 <token> <channel>\n" (token: 32 lowercase hex
// characters), then raw bytes flow both ways until each side half-closes.
// Nothing comes back before the target dials its unix socket: a refused
// connection is simply closed.
package migproxy
