package criservice

import (
	"context"
	"errors"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Clones is what the CRI face asks of VM templates (package instant): a
// VM pod that asks for its template is planned as a clone of it where it
// can be, or its VM boots and says why; a clone's root disk and domain
// are its template's, and its first start restores it.
type Clones interface {
	PlanClone(a instant.Ask) (cold string)
	NoteCold(id, why string)
	CopyDisk(c *store.Container, path string) error
	CloneXML(c *store.Container, spec vm.Spec) (string, error)
	StartClone(ctx context.Context, l virt.Libvirt, c *store.Container, boot func() error) (restored bool, err error)
	ForgetAsks(pod string)
}

// clones is r.Clones, or, with none, one that plans no clone.
func (r *Service) clones() Clones {
	if r.Clones == nil {
		return noClones{}
	}
	return r.Clones
}

// noClones plans no VM as a clone: every VM boots.
type noClones struct{}

var errNoClones = errors.New("no VM starts from a template here")

func (noClones) PlanClone(instant.Ask) string                       { return "" }
func (noClones) NoteCold(string, string)                            {}
func (noClones) CopyDisk(*store.Container, string) error            { return errNoClones }
func (noClones) CloneXML(*store.Container, vm.Spec) (string, error) { return "", errNoClones }
func (noClones) ForgetAsks(string)                                  {}
func (noClones) StartClone(_ context.Context, _ virt.Libvirt, _ *store.Container, boot func() error) (bool, error) {
	return false, boot()
}

// planClone asks for p's VM to be a clone of its template, and says why
// it boots instead ("" when it is one, or its pod did not ask).
func (r *Service) planClone(sb *store.Sandbox, p *vmPlan, in vmRequest) (cold string) {
	return r.clones().PlanClone(instant.Ask{Pod: sb, VM: p.rec, Layout: p.layout, Opts: in.opts, Storage: in.storage,
		RootVolume: p.root != nil, HugePages: p.spec.HugePageKiB != 0, DiskBooted: r.RootDisks.PodDiskReusable(sb, p.layout.Digest)})
}

// fromTemplate copies the template's disk, a clone's root disk, to its
// pod's (RootDisks.MakePodDisk); nil for a VM that is no clone.
func (r *Service) fromTemplate(p *vmPlan) func(dst string) error {
	if p.rec.Clone == nil {
		return nil
	}
	return func(dst string) error { return r.clones().CopyDisk(p.rec, dst) }
}

// startQemu starts VM c's qemu: a clone's first start restores its
// template's state (Clones.StartClone); any other start boots it.
// restored says which.
func (r *Service) startQemu(ctx context.Context, l virt.Libvirt, c *store.Container) (restored bool, err error) {
	boot := func() error {
		return r.StartingQemu(c, func() error {
			_, err := l.StartIfOff(c.Domain)
			return err
		})
	}
	if c.Clone == nil {
		return false, boot()
	}
	return r.clones().StartClone(ctx, l, c, boot)
}
