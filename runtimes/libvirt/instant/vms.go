package instant

import (
	"os"
	"sync"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// A template is made by booting its image once in a VM of no pod's: a
// domain named template.Domain(key), known to the runtime only while it
// is being made. The placement server asks the runtime about it as about
// any crimux VM (its cgroup, its uid, its NIC); the Maker's VMs answer it
// (Placement).

// VM is what placement needs of a template being made.
type VM struct {
	Cgroup core.VMCgroup
	// Identity is the uid and gid its qemu runs as, its own.
	Identity *store.VMIdentity
	// NIC opens a file on its tap for a new qemu and names it with fd.
	NIC func(fd string) (*os.File, []string, error)
}

// vms are the template VMs being made, by domain.
type vms struct {
	mu sync.Mutex
	m  map[string]VM
	// held: identities holds their uids from the pods (vmidentity).
	held sync.Once
}

// makingVM makes domain known as a template being made, until done, and
// gives it a uid and gid of its own (nil where identities are off), which
// no pod gets while it is known.
func (m *Maker) makingVM(domain string, t VM) (id *store.VMIdentity, done func(), err error) {
	m.vms.held.Do(func() { m.R.IDs.HeldBy(m.vms.identities) })
	err = m.R.IDs.Take(func(given *store.VMIdentity) {
		t.Identity = given
		m.vms.mu.Lock()
		defer m.vms.mu.Unlock()
		if m.vms.m == nil {
			m.vms.m = map[string]VM{}
		}
		m.vms.m[domain] = t
	})
	if err != nil {
		return nil, nil, err
	}
	return t.Identity, func() {
		m.vms.mu.Lock()
		defer m.vms.mu.Unlock()
		delete(m.vms.m, domain)
	}, nil
}

// vm is the template being made as domain, if it is one.
func (m *Maker) vm(domain string) (VM, bool) {
	m.vms.mu.Lock()
	defer m.vms.mu.Unlock()
	t, ok := m.vms.m[domain]
	return t, ok
}

// identities are the uids templates being made run as: no pod may be
// given one (vmidentity.Allocator's held).
func (v *vms) identities() []uint32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var ids []uint32
	for _, t := range v.m {
		if t.Identity != nil {
			ids = append(ids, t.Identity.UID)
		}
	}
	return ids
}

// IsMakingTemplate reports whether domain is a template being made now
// (the collector leaves it alone; any other template domain is left over
// from a crimux that stopped while making it).
func (m *Maker) IsMakingTemplate(domain string) bool {
	_, ok := m.vm(domain)
	return ok
}

// startingVM runs start, the libvirt call that starts a template's qemu,
// with a grant open for its placement (as core's StartingQemu for a
// pod's).
func (m *Maker) startingVM(domain string, start func() error) error {
	if o := m.R.Opts; o.Identities.Count > 0 && o.PlacementSocket != "" {
		if err := hostcaps.OpenLibvirtDirs(hostcaps.LibvirtDirs); err != nil {
			return err
		}
	}
	defer m.R.Starts.Arm(domain)()
	return start()
}
