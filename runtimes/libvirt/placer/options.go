package placer

import (
	"log/slog"
)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) PlacerOption { return func(p *Placer) { p.log = l } }

// WithPeerUIDs accepts only callers running as one of uids (the qemu user
// of qemu.conf, e.g. libvirt-qemu, and root where qemu runs as root).
// Without it any local user that can reach the socket may ask.
func WithPeerUIDs(uids ...uint32) PlacerOption {
	return func(p *Placer) { p.uids = append(p.uids, uids...) }
}

// WithPeer accepts only callers whose uid passes peer: checked before a
// byte is read (every VM's own uid, where each VM has one).
func WithPeer(peer func(uid uint32) bool) PlacerOption {
	return func(p *Placer) { p.peer = peer }
}

// WithDomainOwner accepts a request for a domain only from the uid that
// domain's qemu runs as (owner(domain, uid)): with a uid per VM, a qemu
// cannot even ask for a neighbour's placement.
func WithDomainOwner(owner func(domain string, uid uint32) bool) PlacerOption {
	return func(p *Placer) { p.owner = owner }
}

// WithPlaced runs placed once a VM's process is in its cgroup, before
// it runs qemu; an error fails the placement (qemu does not run).
func WithPlaced(placed func(domain string, pid int) error) PlacerOption {
	return func(p *Placer) { p.placed = placed }
}

// WithExecutable accepts only callers whose /proc/<pid>/exe is path: the
// installed wrapper.
func WithExecutable(path string) PlacerOption { return func(p *Placer) { p.exe = path } }

// WithAttach has the Placer, once it placed a VM's qemu, ask attach for the
// files and arguments the wrapper hands qemu (a tap device opened in the
// pod's network namespace, and the -netdev naming it), and send them with
// its answer. It is asked on every request, retries of a wrapper whose
// answer was lost included. An error of attach, or an Attachment breaking
// the protocol's limits, is answered as a refusal: qemu does not start
// without what it was to get. The Placer closes the files once it answered,
// whether the answer went out or not; an empty Attachment answers plain ok.
func WithAttach(attach func(domain string) (Attachment, error)) PlacerOption {
	return func(p *Placer) { p.attach = attach }
}

// WithGrants makes every placement need a grant: granted(domain) is true
// only while crimux's own start of that domain is in flight, once per
// start (see the VM runtime's core.Starts). Without it any start libvirt
// makes is placed.
func WithGrants(granted func(domain string) bool) PlacerOption {
	return func(p *Placer) { p.granted = granted }
}

// WithLauncher sets how the Placer reads the cgroups of the process that
// starts qemu (default: libvirtd's or virtqemud's, found in /proc).
func WithLauncher(cgroups func() (string, error)) PlacerOption {
	return func(p *Placer) { p.launcher = cgroups }
}
