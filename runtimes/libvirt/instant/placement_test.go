package instant

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// TestPlacementOfATemplateBeingMade: while a template is made, the
// placement server gets its VM's cgroup, its own uid (no pod's), its tap
// and no storage, and leaves its OOM score; once done, it is no VM of the
// runtime's, its uid free again. Any other domain is the core's.
func TestPlacementOfATemplateBeingMade(t *testing.T) {
	e := coretest.New(t, coretest.Options{Identities: vmidentity.Range{Base: 700000, Count: 3}}) // 700001, 700002
	m := &Maker{R: CoreOf(e.R), Store: template.Store{Dir: filepath.Join(e.Dir, "templates")}}
	p := Placement{Maker: m, Core: e.R}
	domain := template.Domain("0000000000000001")
	cg := core.VMCgroup{Parent: DefaultParent, Name: domain}
	errNIC := errors.New("the template's tap")
	id, done, err := m.makingVM(domain, VM{Cgroup: cg, NIC: func(fd string) (*os.File, []string, error) { return nil, []string{fd}, errNIC }})
	if err != nil || id == nil || id.UID != 700001 {
		t.Fatalf("the template's identity: %+v, %v; want 700001", id, err)
	}
	if !m.IsMakingTemplate(domain) {
		t.Fatal("a template being made is not known as one")
	}
	if got, ok := p.CgroupForDomain(domain); !ok || got != cg {
		t.Errorf("its cgroup: %+v, %v", got, ok)
	}
	if got, ok := p.IdentityForDomain(domain); !ok || got != id {
		t.Errorf("its identity: %+v, %v", got, ok)
	}
	if _, args, err := p.NICForDomain(domain, "{fd}"); !errors.Is(err, errNIC) || len(args) != 1 || args[0] != "{fd}" {
		t.Errorf("its NIC: %v, %v", args, err)
	}
	if files, args, err := p.StorageForDomain(domain, func(int) string { return "{fd}" }); files != nil || args != nil || err != nil {
		t.Errorf("its storage: %v, %v, %v; want none", files, args, err)
	}
	if err := p.SetOOMScore(domain, os.Getpid()); err != nil {
		t.Errorf("its OOM score: %v", err)
	}
	sb := e.PutPod(t, "p1", nil)
	if pid, err := e.R.EnsureIdentity(sb); err != nil || pid.UID != 700002 {
		t.Fatalf("a pod's identity while the template holds 700001: %+v, %v", pid, err)
	}

	done()
	if m.IsMakingTemplate(domain) {
		t.Fatal("a template made is known as being made still")
	}
	if _, ok := p.CgroupForDomain(domain); ok {
		t.Error("a template made: the core gives its domain a cgroup")
	}
	if _, ok := p.IdentityForDomain(domain); ok {
		t.Error("a template made: the core gives its domain an identity")
	}
	if _, _, err := p.NICForDomain(domain, "{fd}"); err == nil {
		t.Error("a template made: the core gives its domain a NIC")
	}
	if _, _, err := p.StorageForDomain(domain, func(int) string { return "{fd}" }); err == nil {
		t.Error("a template made: the core gives its domain storage")
	}
	if err := p.SetOOMScore(domain, os.Getpid()); err == nil {
		t.Error("a template made: the core sets its domain's OOM score")
	}
	if id, done, err := m.makingVM(domain, VM{Cgroup: cg}); err != nil || id == nil || id.UID != 700001 {
		t.Fatalf("the next template's identity: %+v, %v; want 700001, free again", id, err)
	} else {
		done()
	}
	if _, ok := (Placement{Core: e.R}).CgroupForDomain(domain); ok {
		t.Error("templates off: a template's domain has a cgroup")
	}
}
