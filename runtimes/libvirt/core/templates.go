package core

import (
	"os"
	"strings"
	"sync"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A template is made by booting its image once in a VM of no
// pod's: a domain named TemplateDomain(key), known to the runtime only
// while it is being made. The placement server asks the runtime about it
// as about any crimux VM (its cgroup, its uid, its NIC); these answer it.

// TemplateDomainPrefix starts the name of a template's domain; the rest
// is the template's key. It is a crimux domain name (the qemu wrapper and
// the placement server serve it) that no container ID can take.
var TemplateDomainPrefix = vm.DomainName("template-")

// TemplateDomain is the domain name of template key while it is made.
func TemplateDomain(key string) string { return TemplateDomainPrefix + key }

// TemplateKeyOf is the key of a template's domain name.
func TemplateKeyOf(domain string) (string, bool) {
	return strings.CutPrefix(domain, TemplateDomainPrefix)
}

// TemplateVM is what placement needs of a template being made.
type TemplateVM struct {
	Cgroup VMCgroup
	// Identity is the uid and gid its qemu runs as, its own.
	Identity *store.VMIdentity
	// NIC opens a file on its tap for a new qemu and names it with fd.
	NIC func(fd string) (*os.File, []string, error)
}

type templateVMs struct {
	mu sync.Mutex
	m  map[string]TemplateVM
}

// MakingTemplate makes domain known as a template being made, until
// done, and gives it a uid and gid of its own (nil where identities are
// off), which no pod gets while it is known.
func (r *Runtime) MakingTemplate(domain string, t TemplateVM) (id *store.VMIdentity, done func(), err error) {
	err = r.ids.Take(func(given *store.VMIdentity) {
		t.Identity = given
		r.templates.mu.Lock()
		defer r.templates.mu.Unlock()
		if r.templates.m == nil {
			r.templates.m = map[string]TemplateVM{}
		}
		r.templates.m[domain] = t
	})
	if err != nil {
		return nil, nil, err
	}
	return t.Identity, func() {
		r.templates.mu.Lock()
		defer r.templates.mu.Unlock()
		delete(r.templates.m, domain)
	}, nil
}

// templateVM is the template being made as domain, if it is one.
func (r *Runtime) templateVM(domain string) (TemplateVM, bool) {
	r.templates.mu.Lock()
	defer r.templates.mu.Unlock()
	t, ok := r.templates.m[domain]
	return t, ok
}

// templateIdentities are the uids templates being made run as: no pod
// may be given one (vmidentity.Allocator's held).
func (r *Runtime) templateIdentities() []uint32 {
	r.templates.mu.Lock()
	defer r.templates.mu.Unlock()
	var ids []uint32
	for _, t := range r.templates.m {
		if t.Identity != nil {
			ids = append(ids, t.Identity.UID)
		}
	}
	return ids
}

// cloneCutShort destroys clone c, found running with its start
// unrecorded (crimux stopped between its restore and its identity), and
// makes its next start a boot: its disk has run since the template's.
func (r *Runtime) cloneCutShort(l virt.Libvirt, dom virt.Domain, c *store.Container) {
	if err := l.Destroy(dom); err != nil {
		r.Log.Warn("a clone restored before crimux stopped not destroyed", "container", c.ID, "err", err)
		return
	}
	c.Clone = nil
	if err := r.Store.PutContainer(c); err != nil {
		r.Log.Error("record a clone cut short", "container", c.ID, "err", err)
		return
	}
	r.Log.Warn("a clone restored before crimux stopped was destroyed (perhaps not made itself yet): it boots at its next start", "container", c.ID)
}

// IsMakingTemplate reports whether domain is a template being made now
// (the collector leaves it alone; any other template domain is left over
// from a crimux that stopped while making it).
func (r *Runtime) IsMakingTemplate(domain string) bool {
	_, ok := r.templateVM(domain)
	return ok
}

// StartingTemplate runs start, the libvirt call that starts a template's
// qemu, with a grant open for its placement (as StartingQemu for a pod's).
func (r *Runtime) StartingTemplate(domain string, start func() error) error {
	if r.Opts.Identities.Count > 0 && r.Opts.PlacementSocket != "" {
		if err := hostcaps.OpenLibvirtDirs(hostcaps.LibvirtDirs); err != nil {
			return err
		}
	}
	defer r.Starts.Arm(domain)()
	return start()
}
