package instant

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
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
)

// Handler is the RuntimeClass handler whose VM pods start from
// their image's booted template where their shape allows.
const Handler = "vm-instant"

// A VM pod that asks for it (RuntimeClass vm-instant, or the annotation
// crimux.io/start: template) is restored from its image's template in its
// shape, if there is one ready; otherwise it boots, and its log and
// events say why. The first pod of an image and shape starts the
// template's making, in the background: it boots meanwhile.

// Room is the VM pods' side of templates, for the CRI face: a VM planned
// as a clone of its template (PlanClone) or booting and saying why
// (NoteCold), a clone's disk and domain (CopyDisk, CloneXML), its first
// start a restore (StartClone); and the VM API's templates
// (templates.go).
type Room struct {
	R Core
	// Maker makes the templates; nil: templates are off on this node
	// (every VM boots, the VM API's template calls are refused).
	Maker *Maker
}

// Ask is a VM pod's VM about to be made, as its template sees it: its
// pod, its record (PlanClone makes it a clone), its image, what its pod
// asked, and what of it the CRI face found no template can hold.
type Ask struct {
	Pod     *store.Sandbox
	VM      *store.Container
	Layout  core.ImageLayout
	Opts    vm.Options
	Storage vm.Storage
	// RootVolume: its root disk is on a volume of its own; HugePages: its
	// RAM is on huge pages; DiskBooted: its pod's root disk has booted
	// already.
	RootVolume, HugePages, DiskBooted bool
}

// wantsTemplate: the pod asked to start from a template.
func wantsTemplate(sb *store.Sandbox, opts vm.Options) bool {
	switch opts.Start {
	case vm.StartTemplate:
		return true
	case vm.StartBoot:
		return false
	}
	return sb.Handler == Handler
}

// PlanClone makes a.VM a clone of its template, or says why its VM boots
// ("" when the pod did not ask for a template).
func (r *Room) PlanClone(a Ask) (cold string) {
	if !wantsTemplate(a.Pod, a.Opts) {
		return ""
	}
	if why := r.unclonable(a); why != "" {
		return why
	}
	req := cloneRequest(a.VM, a.Pod)
	req.Layout = a.Layout
	meta, err := r.Maker.Get(req)
	switch {
	case errors.Is(err, ErrOtherTemplate):
		// Not replaced either: the template there serves others.
		return fmt.Sprintf("its template cannot be used: %v", err)
	case errdefs.IsNotFound(err) || err == nil && meta.State == template.Failed && r.Maker.RetryIn(meta) == 0:
		if err := r.Maker.Start(req, a.Pod.ID); err != nil {
			return fmt.Sprintf("its template (image %s, %s) is not being made: %v", a.VM.ImageRef, req.Shape, err)
		}
		return fmt.Sprintf("its template (image %s, %s) is being made now, on its first use", a.VM.ImageRef, req.Shape)
	case err != nil:
		return fmt.Sprintf("its template cannot be read: %v", err)
	case meta.State == template.Making:
		r.Maker.Asks(req, a.Pod.ID)
		return fmt.Sprintf("its template (image %s, %s) is still being made", a.VM.ImageRef, req.Shape)
	case meta.State != template.Ready:
		return fmt.Sprintf("its template %s %s: %s (made again in %s, or at once after crimuxctl template rm %s)",
			meta.Key, meta.State, meta.Error, r.Maker.RetryIn(meta).Round(time.Second), meta.Key)
	}
	r.Maker.Used(meta.Key)
	a.VM.Clone = &store.Clone{Key: meta.Key, UUID: uuid.NewString(), MachineID: newMachineID()}
	return ""
}

// ForgetAsks: pod is stopped (it never runs again), so no template being
// made in the background is made for it any more.
func (r *Room) ForgetAsks(pod string) {
	if r.Maker != nil {
		r.Maker.Forget(pod)
	}
}

// cloneRequest is the template VM c of pod sb is restored from: its
// image, its shape, its pod's namespace.
func cloneRequest(c *store.Container, sb *store.Sandbox) Request {
	return Request{Image: c.ImageRef, Layout: core.ImageLayout{Digest: c.ImageDigest}, Namespace: sb.Config.GetMetadata().GetNamespace(),
		Shape: template.Shape{VCPUs: c.VCPUs, MaxVCPUs: c.MaxVCPUs, MemoryMiB: c.MemoryMiB, MaxMemoryMiB: c.MaxMemoryMiB, Accel: c.Accel}}
}

// unclonable says why a's VM cannot be restored from a template: what
// qemu cannot save or a template cannot hold.
func (r *Room) unclonable(a Ask) string {
	sb := a.Pod
	switch {
	case r.Maker == nil:
		return "templates are off on this node"
	case len(a.Storage.Shares) > 0:
		return "it has virtio-fs shares, whose state qemu cannot save"
	case len(a.Storage.Devices) > 0:
		return "it has block volumes, which a template cannot hold"
	case a.RootVolume:
		return "its root disk is on a volume of its own (crimux.io/root-disk)"
	case a.HugePages:
		return "its RAM is on huge pages"
	case a.Layout.Kernel != "" || a.Layout.DiskPath == "":
		return "its image boots a kernel of its own (templates need a disk image)"
	case a.Opts.KernelArgs != "":
		return "it sets kernel arguments (crimux.io/kernel-args)"
	case a.DiskBooted:
		return "its pod's root disk has booted already (a restarted container boots it again)"
	case r.R.Net != nil && (sb.Net == nil || !sb.Net.Ready || sb.Net.IP == ""):
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

// CopyDisk copies clone c's template's disk to path, its root disk.
func (r *Room) CopyDisk(c *store.Container, path string) error {
	if err := r.errTemplatesOff(); err != nil {
		return err
	}
	return r.Maker.CopyDisk(c.Clone.Key, path)
}

// CloneXML is the domain of clone c: its template's, with what of spec
// the clone makes its own.
func (r *Room) CloneXML(c *store.Container, spec vm.Spec) (string, error) {
	if err := r.errTemplatesOff(); err != nil {
		return "", err
	}
	s := vm.CloneSpec{Name: c.Domain, UUID: c.Clone.UUID, Meta: spec.Meta, Identity: spec.Identity,
		CIData: spec.CIData, Console: spec.Console}
	if spec.Disk != nil {
		s.Disk = spec.Disk.Path
	}
	return r.Maker.CloneXML(c.Clone.Key, s)
}

// Event reasons of how a VM that asked for its template started.
const (
	ReasonBootedCold        = "VMBootedCold"
	ReasonRestoredTemplate  = "VMRestoredFromTemplate"
	coldMessagePrefix       = "this VM boots instead of starting from its template: "
	restoredMessageTemplate = "this VM was restored from template %s in %s and made its own: its hostname, machine ID, address and RNG now; " +
		"new SSH host keys and cloud-init's per-instance stages in the background (/var/log/crimux-clone.log in the guest)"
)

// NoteCold says in VM id's log, its pod's events and crimux's log why a
// VM that asked for its template boots (why, PlanClone's; "": it did not
// ask, or it is a clone).
func (r *Room) NoteCold(id, why string) {
	if why == "" {
		return
	}
	r.R.Counters.TemplateClone(vmcounters.CloneBooted)
	r.R.Log.Info("VM boots instead of starting from its template", "container", id, "why", why)
	r.R.StartNotice(id, ReasonBootedCold, coldMessagePrefix+why)
}

// StartClone starts clone c's qemu: its first start restores its
// template's state and makes it itself; boot boots it instead. restored
// says which. A clone whose restore fails boots instead (its disk is the
// template's, as after a power cut), and says so; one that was restored
// but could not be made itself is destroyed, never left running as its
// template.
func (r *Room) StartClone(ctx context.Context, l virt.Libvirt, c *store.Container, boot func() error) (restored bool, err error) {
	if r.Maker == nil {
		return false, boot()
	}
	done, err := r.Maker.Restores.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	began := time.Now()
	key := c.Clone.Key
	err = r.R.StartingQemu(c, func() error { return r.restoreClone(ctx, l, c) })
	if err != nil {
		r.R.Counters.TemplateClone(vmcounters.CloneBooted)
		r.R.Log.Warn("clone not restored: it boots", "container", c.ID, "template", key, "err", err)
		r.R.StartNotice(c.ID, ReasonBootedCold, coldMessagePrefix+"its restore failed: "+err.Error())
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
		r.R.Counters.TemplateClone(vmcounters.CloneBooted)
		return false, errors.Join(fmt.Errorf("clone %s of template %s: %w", c.ID, key, err), r.forgetClone(c))
	}
	took := time.Since(began).Round(time.Millisecond)
	r.R.Counters.TemplateClone(vmcounters.CloneRestored)
	r.R.Log.Info("VM restored from its template", "container", c.ID, "template", c.Clone.Key, "took", took,
		"restore", loaded.Sub(began).Round(time.Millisecond), "identity", time.Since(loaded).Round(time.Millisecond))
	r.R.StartNotice(c.ID, ReasonRestoredTemplate, fmt.Sprintf(restoredMessageTemplate, c.Clone.Key, took))
	return true, nil
}

// forgetClone makes VM c's next start a boot.
func (r *Room) forgetClone(c *store.Container) error {
	c.Clone = nil
	return r.R.Store.PutContainer(c)
}

// restoreClone restores VM c, defined from its template's saved domain,
// through a FIFO in its directory (root's: qemu cannot list it).
func (r *Room) restoreClone(ctx context.Context, l virt.Libvirt, c *store.Container) error {
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return err
	}
	xml, err := l.XML(dom)
	if err != nil {
		return err
	}
	sb, err := r.R.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	// Its template may have been replaced since its plan: restored only
	// from its own (namespace, image, shape, crimux version).
	if err := r.Maker.Serves(c.Clone.Key, cloneRequest(c, sb)); err != nil {
		return err
	}
	return r.Maker.Restore(ctx, l, c.Clone.Key, xml, filepath.Join(c.Dir, restoreFIFO))
}

// restoreFIFO is where a clone's saved state is fed to libvirtd.
const restoreFIFO = "restore.fifo"

// becomeItself gives restored clone c its pod's identity.
func (r *Room) becomeItself(ctx context.Context, l virt.Libvirt, dom virt.Domain, c *store.Container) error {
	sb, err := r.R.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	id := template.Identity{Hostname: sb.Config.GetHostname(), MachineID: c.Clone.MachineID}
	if id.Hostname == "" {
		id.Hostname = sb.Config.GetMetadata().GetName()
	}
	if n := sb.Net; n != nil && r.R.Net != nil {
		id.TemplateMAC, id.MAC = TemplateMAC(c.Clone.Key), n.GuestMAC
		for _, a := range n.Addresses() {
			id.Addresses = append(id.Addresses, template.Address{IP: a.IP, PrefixLen: a.PrefixLen, Gateway: a.Gateway})
		}
	}
	return BecomeItself(ctx, l, dom, id)
}
