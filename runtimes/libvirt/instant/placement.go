package instant

import (
	"os"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Placement answers the placement server (package placer, served by the
// runtime) about every crimux domain: a template's being made here from
// its Maker's VMs, any other from the runtime's core.
type Placement struct {
	// Maker makes the templates; nil: templates are off, no domain is a
	// template's.
	Maker *Maker
	Core  placementCore
}

// placementCore is what the placement server asks the runtime's core of
// a pod's VM.
type placementCore interface {
	CgroupForDomain(domain string) (core.VMCgroup, bool)
	IdentityForDomain(domain string) (*store.VMIdentity, bool)
	NICForDomain(domain, fd string) (*os.File, []string, error)
	StorageForDomain(domain string, placeholder func(i int) string) (files []*os.File, args []string, err error)
	SetOOMScore(domain string, pid int) error
}

// template is the template being made as domain, if it is one.
func (p Placement) template(domain string) (VM, bool) {
	if p.Maker == nil {
		return VM{}, false
	}
	return p.Maker.vm(domain)
}

// CgroupForDomain is the cgroup a domain's qemu belongs in; ok is false
// for a domain this runtime does not own.
func (p Placement) CgroupForDomain(domain string) (core.VMCgroup, bool) {
	if t, ok := p.template(domain); ok {
		return t.Cgroup, true
	}
	return p.Core.CgroupForDomain(domain)
}

// IdentityForDomain is the identity a domain's qemu runs as: a
// template's own, or its pod's.
func (p Placement) IdentityForDomain(domain string) (*store.VMIdentity, bool) {
	if t, ok := p.template(domain); ok {
		return t.Identity, true
	}
	return p.Core.IdentityForDomain(domain)
}

// NICForDomain is the NIC a domain's qemu gets: a template's tap, or its
// pod's.
func (p Placement) NICForDomain(domain, fd string) (*os.File, []string, error) {
	if t, ok := p.template(domain); ok {
		return t.NIC(fd)
	}
	return p.Core.NICForDomain(domain, fd)
}

// StorageForDomain is the storage a domain's qemu gets: its VM's.
func (p Placement) StorageForDomain(domain string, placeholder func(i int) string) ([]*os.File, []string, error) {
	if _, ok := p.template(domain); ok {
		return nil, nil, nil // a template has no volumes
	}
	return p.Core.StorageForDomain(domain, placeholder)
}

// SetOOMScore gives a pod's VM's newly placed process its container's OOM
// score adjustment.
func (p Placement) SetOOMScore(domain string, pid int) error {
	if _, ok := p.template(domain); ok {
		return nil // no pod's: qemu's own score
	}
	return p.Core.SetOOMScore(domain, pid)
}
