package libvirt

import (
	"context"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/client"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/placement"
	"github.com/crimux/crimux/runtimes/libvirt/placer"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmimage"
)

// The adapters below connect the runtime to the host: images from
// containerd's store (vmimage), cgroups from the host's hierarchies
// (cgroup), and the placement server the qemu wrapper asks.

// ContainerdImages reads VM images out of the containerd at endpoint
// ("unix:///path"), caching their files under cacheDir.
func ContainerdImages(endpoint, cacheDir string) (core.ImageReader, func() error, error) {
	c, err := client.New(strings.TrimPrefix(endpoint, "unix://"))
	if err != nil {
		return nil, nil, fmt.Errorf("containerd client for VM images: %w", err)
	}
	return vmImages{vmimage.NewReader(c.ImageService(), c.ContentStore(), cacheDir)}, c.Close, nil
}

type vmImages struct{ r *vmimage.Reader }

func (v vmImages) Prepare(ctx context.Context, ref string) (core.ImageLayout, error) {
	l, err := v.r.Prepare(ctx, ref)
	if err != nil {
		return core.ImageLayout{}, err
	}
	out := core.ImageLayout{Digest: l.Digest, Kernel: l.Kernel, Initrd: l.Initrd, KernelArgs: l.KernelArgs}
	if l.Disk != nil {
		out.DiskPath, out.DiskFormat, out.DiskVirtualSize = l.Disk.Path, l.Disk.Format, l.Disk.VirtualSize
	}
	return out, nil
}

// HostCgroups manages VM cgroups in the host's cgroup hierarchies.
func HostCgroups() (core.Cgroups, error) {
	l, err := cgroup.Discover()
	if err != nil {
		return nil, fmt.Errorf("discover cgroup hierarchies: %w", err)
	}
	return hostCgroups{l}, nil
}

type hostCgroups struct{ l cgroup.Layout }

func (h hostCgroups) Create(c core.VMCgroup) error { return h.l.Create(cgroup.Spec(c)) }

func (h hostCgroups) Update(c core.VMCgroup) error { return h.l.Update(cgroup.Spec(c)) }

func (h hostCgroups) Remove(c core.VMCgroup) error { return h.l.Remove(cgroup.Spec(c)) }

func (h hostCgroups) Place(c core.VMCgroup, pid int) error { return h.l.Place(cgroup.Spec(c), pid) }

func (h hostCgroups) MemoryRoom(parent string) (int64, bool, error) { return h.l.MemoryLimit(parent) }

func (h hostCgroups) Stats(c core.VMCgroup) (core.CgroupUsage, error) {
	u, err := h.l.Stats(cgroup.Spec(c))
	return core.CgroupUsage(u), err
}

// servePlacement runs the placement server: the qemu wrapper of a crimux
// domain asks it to be moved into the VM's cgroup before it execs qemu.
// Only the wrapper executable, run by root or libvirt's qemu user, is
// answered. placement gives who answers for a domain (the runtime's
// placement: a template's Maker or the core).
func servePlacement(ctx context.Context, socket string, r *core.Runtime, placement func() instant.Placement) {
	answers := placement()
	shared := []uint32{0} // libvirt's one qemu user: VMs without an identity of their own
	if u, err := user.Lookup(vmfiles.QemuUser); err == nil {
		if uid, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			shared = append(shared, uint32(uid))
		}
	}
	peer := func(uid uint32) bool { return slices.Contains(shared, uid) || r.Opts.Identities.Contains(uid) }
	owner := func(domain string, uid uint32) bool {
		id, ok := answers.IdentityForDomain(domain)
		if !ok || id == nil {
			return ok && slices.Contains(shared, uid)
		}
		return uid == id.UID
	}
	p := placer.New(socket, func(domain string) (cgroup.Spec, bool) {
		cg, ok := answers.CgroupForDomain(domain)
		return cgroup.Spec(cg), ok
	}, placer.WithAttach(func(domain string) (placer.Attachment, error) { return attachForDomain(placement(), domain) }), placer.WithGrants(r.Starts.Take), placer.WithLogger(r.Log.With("component", "placement")),
		placer.WithExecutable(r.Opts.Emulator), placer.WithPeer(peer), placer.WithDomainOwner(owner),
		placer.WithPlaced(answers.SetOOMScore))
	go func() {
		if err := p.Serve(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("placement server stopped", "socket", socket, "err", err)
		}
	}()
}

// attachForDomain hands a VM's qemu its guest NIC (the pod's tap, opened
// in the pod's namespace: runtimes/libvirt/podnet) and its storage (block
// devices crimux opened, the sockets of its shares' virtiofsd:
// core.StorageForDomain).
func attachForDomain(answers instant.Placement, domain string) (placer.Attachment, error) {
	var a placer.Attachment
	f, args, err := answers.NICForDomain(domain, placement.FDPlaceholder(0))
	if err != nil {
		return a, err
	}
	if f != nil {
		a.Files, a.Args = append(a.Files, f), args
	}
	n := len(a.Files)
	files, args, err := answers.StorageForDomain(domain, func(i int) string { return placement.FDPlaceholder(n + i) })
	if err != nil {
		for _, f := range a.Files {
			f.Close()
		}
		return placer.Attachment{}, err
	}
	a.Files, a.Args = append(a.Files, files...), append(a.Args, args...)
	return a, nil
}
