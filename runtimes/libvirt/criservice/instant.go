package criservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
)

// InstantHandler is the RuntimeClass handler whose VM pods start from
// their image's booted template where their shape allows.
const InstantHandler = "vm-instant"

// A VM pod that asks for it (RuntimeClass vm-instant, or the annotation
// crimux.io/start: template) is restored from its image's template in its
// shape, if there is one ready; otherwise it boots, and its log and
// events say why. The first pod of an image and shape starts the
// template's making, in the background: it boots meanwhile.

// wantsTemplate: the pod asked to start from a template.
func wantsTemplate(sb *store.Sandbox, opts vm.Options) bool {
	switch opts.Start {
	case vm.StartTemplate:
		return true
	case vm.StartBoot:
		return false
	}
	return sb.Handler == InstantHandler
}

// planClone makes p a clone of its template, or says why its VM boots
// ("" when the pod did not ask for a template).
func (r *Service) planClone(sb *store.Sandbox, p *vmPlan, opts vm.Options, storage vm.Storage) (cold string) {
	if !wantsTemplate(sb, opts) {
		return ""
	}
	if why := r.unclonable(sb, p, opts, storage); why != "" {
		return why
	}
	req := cloneRequest(p.rec, sb)
	req.Layout = p.layout
	meta, err := r.Instant.Get(req)
	switch {
	case errors.Is(err, instant.ErrOtherTemplate):
		// Not replaced either: the template there serves others.
		return fmt.Sprintf("its template cannot be used: %v", err)
	case errdefs.IsNotFound(err) || err == nil && meta.State == template.Failed && r.Instant.RetryIn(meta) == 0:
		if err := r.Instant.Start(req, sb.ID); err != nil {
			return fmt.Sprintf("its template (image %s, %s) is not being made: %v", p.rec.ImageRef, req.Shape, err)
		}
		return fmt.Sprintf("its template (image %s, %s) is being made now, on its first use", p.rec.ImageRef, req.Shape)
	case err != nil:
		return fmt.Sprintf("its template cannot be read: %v", err)
	case meta.State == template.Making:
		r.Instant.Asks(req, sb.ID)
		return fmt.Sprintf("its template (image %s, %s) is still being made", p.rec.ImageRef, req.Shape)
	case meta.State != template.Ready:
		return fmt.Sprintf("its template %s %s: %s (made again in %s, or at once after crimuxctl template rm %s)",
			meta.Key, meta.State, meta.Error, r.Instant.RetryIn(meta).Round(time.Second), meta.Key)
	}
	r.Instant.Used(meta.Key)
	p.rec.Clone = &store.Clone{Key: meta.Key, UUID: uuid.NewString(), MachineID: newMachineID()}
	return ""
}

// forgetTemplateAsks: pod is stopped (it never runs again), so no
// template being made in the background is made for it any more.
func (r *Service) forgetTemplateAsks(pod string) {
	if r.Instant != nil {
		r.Instant.Forget(pod)
	}
}

// cloneRequest is the template VM c of pod sb is restored from: its
// image, its shape, its pod's namespace.
func cloneRequest(c *store.Container, sb *store.Sandbox) instant.Request {
	return instant.Request{Image: c.ImageRef, Layout: core.ImageLayout{Digest: c.ImageDigest}, Namespace: sb.Config.GetMetadata().GetNamespace(),
		Shape: template.Shape{VCPUs: c.VCPUs, MaxVCPUs: c.MaxVCPUs, MemoryMiB: c.MemoryMiB, MaxMemoryMiB: c.MaxMemoryMiB, Accel: c.Accel}}
}

// unclonable says why p's VM cannot be restored from a template: what
// qemu cannot save or a template cannot hold.
func (r *Service) unclonable(sb *store.Sandbox, p *vmPlan, opts vm.Options, storage vm.Storage) string {
	switch {
	case r.Instant == nil:
		return "templates are off on this node"
	case len(storage.Shares) > 0:
		return "it has virtio-fs shares, whose state qemu cannot save"
	case len(storage.Devices) > 0:
		return "it has block volumes, which a template cannot hold"
	case p.root != nil:
		return "its root disk is on a volume of its own (crimux.io/root-disk)"
	case p.spec.HugePageKiB != 0:
		return "its RAM is on huge pages"
	case p.layout.Kernel != "" || p.layout.DiskPath == "":
		return "its image boots a kernel of its own (templates need a disk image)"
	case opts.KernelArgs != "":
		return "it sets kernel arguments (crimux.io/kernel-args)"
	case r.RootDisks.PodDiskReusable(sb, p.layout.Digest):
		return "its pod's root disk has booted already (a restarted container boots it again)"
	case r.Net != nil && (sb.Net == nil || !sb.Net.Ready || sb.Net.IP == ""):
		return "its pod has no network address for a clone to take"
	}
	return ""
}

// newMachineID is a random systemd machine ID (32 lowercase hex digits).
func newMachineID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cloneSpec is what the clone's domain makes its own.
func cloneSpec(p *vmPlan) vm.CloneSpec {
	s := vm.CloneSpec{Name: p.rec.Domain, UUID: p.rec.Clone.UUID, Meta: p.spec.Meta, Identity: p.spec.Identity,
		CIData: p.spec.CIData, Console: p.spec.Console}
	if p.spec.Disk != nil {
		s.Disk = p.spec.Disk.Path
	}
	return s
}

// fromTemplate copies the template's disk, a clone's root disk, to its
// pod's (RootDisks.MakePodDisk); nil for a VM that is no clone.
func (r *Service) fromTemplate(p *vmPlan) func(dst string) error {
	if p.rec.Clone == nil {
		return nil
	}
	key := p.rec.Clone.Key
	return func(dst string) error { return r.Instant.CopyDisk(key, dst) }
}

// Event reasons of how a VM that asked for its template started.
const (
	ReasonBootedCold        = "VMBootedCold"
	ReasonRestoredTemplate  = "VMRestoredFromTemplate"
	coldMessagePrefix       = "this VM boots instead of starting from its template: "
	restoredMessageTemplate = "this VM was restored from template %s in %s and made its own: its hostname, machine ID, address and RNG now; " +
		"new SSH host keys and cloud-init's per-instance stages in the background (/var/log/crimux-clone.log in the guest)"
)

// noteStart says in the VM's log, its pod's events and crimux's log why
// a VM that asked for its template boots.
func (r *Service) noteStart(p *vmPlan) {
	if p.cold == "" {
		return
	}
	r.Opts.Counters.TemplateClone(vmcounters.CloneBooted)
	r.Log.Info("VM boots instead of starting from its template", "container", p.rec.ID, "why", p.cold)
	r.StartNotice(p.rec.ID, ReasonBootedCold, coldMessagePrefix+p.cold)
}

// startQemu starts VM c's qemu: a clone's first start restores its
// template's state and makes it itself; any other start boots it.
// restored says which. A clone whose restore fails boots instead (its
// disk is the template's, as after a power cut), and says so; one that
// was restored but could not be made itself is destroyed, never left
// running as its template.
func (r *Service) startQemu(ctx context.Context, l virt.Libvirt, c *store.Container) (restored bool, err error) {
	boot := func() error {
		return r.StartingQemu(c, func() error {
			_, err := l.StartIfOff(c.Domain)
			return err
		})
	}
	if c.Clone == nil || r.Instant == nil {
		return false, boot()
	}
	done, err := r.Instant.Restores.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	began := time.Now()
	key := c.Clone.Key
	err = r.StartingQemu(c, func() error { return r.restoreClone(ctx, l, c) })
	if err != nil {
		r.Opts.Counters.TemplateClone(vmcounters.CloneBooted)
		r.Log.Warn("clone not restored: it boots", "container", c.ID, "template", key, "err", err)
		r.StartNotice(c.ID, ReasonBootedCold, coldMessagePrefix+"its restore failed: "+err.Error())
		if err := r.forgetClone(c); err != nil {
			return false, err
		}
		return false, boot()
	}
	loaded := time.Now()
	dom, err := l.Lookup(c.Domain)
	if err == nil {
		err = r.becomeItself(ctx, l, dom, c)
	}
	if err != nil {
		_ = l.Destroy(dom)
		// Its disk has run: a start again boots it.
		r.Opts.Counters.TemplateClone(vmcounters.CloneBooted)
		return false, errors.Join(fmt.Errorf("clone %s of template %s: %w", c.ID, key, err), r.forgetClone(c))
	}
	took := time.Since(began).Round(time.Millisecond)
	r.Opts.Counters.TemplateClone(vmcounters.CloneRestored)
	r.Log.Info("VM restored from its template", "container", c.ID, "template", c.Clone.Key, "took", took,
		"restore", loaded.Sub(began).Round(time.Millisecond), "identity", time.Since(loaded).Round(time.Millisecond))
	r.StartNotice(c.ID, ReasonRestoredTemplate, fmt.Sprintf(restoredMessageTemplate, c.Clone.Key, took))
	return true, nil
}

// forgetClone makes VM c's next start a boot.
func (r *Service) forgetClone(c *store.Container) error {
	c.Clone = nil
	return r.Store.PutContainer(c)
}

// restoreClone restores VM c, defined from its template's saved domain,
// through a FIFO in its directory (root's: qemu cannot list it).
func (r *Service) restoreClone(ctx context.Context, l virt.Libvirt, c *store.Container) error {
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return err
	}
	xml, err := l.XML(dom)
	if err != nil {
		return err
	}
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	// Its template may have been replaced since its plan: restored only
	// from its own (namespace, image, shape, crimux version).
	if err := r.Instant.Serves(c.Clone.Key, cloneRequest(c, sb)); err != nil {
		return err
	}
	return r.Instant.Restore(ctx, l, c.Clone.Key, xml, filepath.Join(c.Dir, restoreFIFO))
}

// restoreFIFO is where a clone's saved state is fed to libvirtd.
const restoreFIFO = "restore.fifo"

// becomeItself gives restored clone c its pod's identity.
func (r *Service) becomeItself(ctx context.Context, l virt.Libvirt, dom virt.Domain, c *store.Container) error {
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	id := template.Identity{Hostname: sb.Config.GetHostname(), MachineID: c.Clone.MachineID}
	if id.Hostname == "" {
		id.Hostname = sb.Config.GetMetadata().GetName()
	}
	if n := sb.Net; n != nil && r.Net != nil {
		id.TemplateMAC, id.MAC = instant.TemplateMAC(c.Clone.Key), n.GuestMAC
		for _, a := range n.Addresses() {
			id.Addresses = append(id.Addresses, template.Address{IP: a.IP, PrefixLen: a.PrefixLen, Gateway: a.Gateway})
		}
	}
	return instant.BecomeItself(ctx, l, dom, id)
}
