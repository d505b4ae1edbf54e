package libvirt

import (
	"context"
	"encoding/xml"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"sort"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
)

// Foreign resources are those of another crimux identity: crimux-named
// domains whose crimux metadata names another instance (or is missing),
// and VM pod network namespaces named for another instance. The collector
// reports them and never touches them; an operator lists them and adopts
// or deletes one at a time, by kind and name, through the VM API
// (crimuxctl gc). Each operation checks again that what it is about to
// touch is foreign: nothing of this crimux's own is reachable this way.

// metadataNS is the XML namespace of crimux's domain metadata (vm.Metadata).
const metadataNS = "https://crimux.io/xmlns/vm/1"

// foreignLibvirt is what this file asks of libvirt (*golibvirt.Libvirt;
// a fake in tests).
type foreignLibvirt interface {
	ConnectListAllDomains(int32, golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error)
	DomainLookupByName(string) (golibvirt.Domain, error)
	DomainGetXMLDesc(golibvirt.Domain, golibvirt.DomainXMLFlags) (string, error)
	DomainGetState(golibvirt.Domain, uint32) (int32, int32, error)
	DomainIsActive(golibvirt.Domain) (int32, error)
	DomainIsPersistent(golibvirt.Domain) (int32, error)
	DomainSetMetadata(golibvirt.Domain, int32, golibvirt.OptString, golibvirt.OptString, golibvirt.OptString, golibvirt.DomainModificationImpact) error
}

// ListForeign lists the foreign domains, then the foreign namespaces.
// It needs libvirtd (Unavailable while it is down).
func (r *Runtime) ListForeign(ctx context.Context) ([]vmtypes.ForeignResource, error) {
	l, err := r.conn.get()
	if err != nil {
		return nil, err
	}
	return r.listForeign(l)
}

// AdoptForeign makes a foreign resource this crimux's, then runs a
// collector pass, which treats it as its own: a running domain is taken
// into the store (with its pod's namespace, adopted too), a stopped one
// removed; a namespace no pod of this crimux owns gets CNI DEL. It needs
// libvirtd (Unavailable while it is down): the namespace of a foreign
// VM is refused (adopt the domain instead).
func (r *Runtime) AdoptForeign(ctx context.Context, kind, name string) error {
	switch kind {
	case vmtypes.ForeignDomain:
		l, err := r.conn.get()
		if err != nil {
			return err
		}
		m, err := r.adoptForeignDomain(l, name)
		if err != nil {
			return err
		}
		r.CollectGarbage(ctx, false) // the domain first: its pod then owns the namespace
		r.adoptPodNamespace(l, m)
	case vmtypes.ForeignNetns:
		l, err := r.conn.get()
		if err != nil {
			return fmt.Errorf("netns %q: cannot tell whether a VM of another identity uses it: %w", name, err)
		}
		if err := r.adoptForeignNetns(l, name); err != nil {
			return err
		}
	default:
		return badForeignKind(kind)
	}
	r.CollectGarbage(ctx, false)
	return nil
}

// DeleteForeign removes a foreign resource: a domain is destroyed and
// undefined with its snapshots' metadata and managed save (its files stay
// in the other crimux's state dir), a namespace gets CNI DEL with the
// node's current config and is removed.
func (r *Runtime) DeleteForeign(ctx context.Context, kind, name string) error {
	switch kind {
	case vmtypes.ForeignDomain:
		l, err := r.conn.get()
		if err != nil {
			return err
		}
		return r.deleteForeignDomain(l, name, func(n string) error { return destroyAndUndefine(l, n) })
	case vmtypes.ForeignNetns:
		return r.deleteForeignNetns(ctx, name)
	}
	return badForeignKind(kind)
}

func badForeignKind(kind string) error {
	return errdefs.Invalid("kind", "%q is not a kind of foreign resource: want %s or %s", kind, vmtypes.ForeignDomain, vmtypes.ForeignNetns)
}

func (r *Runtime) listForeign(l foreignLibvirt) ([]vmtypes.ForeignResource, error) {
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("list libvirt domains: %w", classify(err))
	}
	sort.Slice(doms, func(i, j int) bool { return doms[i].Name < doms[j].Name })
	var out []vmtypes.ForeignResource
	pods := map[string]string{} // sandbox ID -> its foreign domain
	for _, d := range doms {
		f, m, ok, err := r.describeDomain(l, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, f)
			if m.SandboxID != "" {
				pods[m.SandboxID] = d.Name
			}
		}
	}
	nss, err := r.foreignNamespaces(pods)
	return append(out, nss...), err
}

// describeDomain reports d when it is a foreign crimux domain.
func (r *Runtime) describeDomain(l foreignLibvirt, d golibvirt.Domain) (vmtypes.ForeignResource, vm.Metadata, bool, error) {
	var m vm.Metadata
	id, crimux := strings.CutPrefix(d.Name, vm.DomainName(""))
	if !crimux || id == "" {
		return vmtypes.ForeignResource{}, m, false, nil
	}
	if owned, err := r.ownsContainer(id); err != nil || owned {
		return vmtypes.ForeignResource{}, m, false, err
	}
	f := vmtypes.ForeignResource{Kind: vmtypes.ForeignDomain, Name: d.Name, State: "unknown"}
	if s, _, err := l.DomainGetState(d, 0); err == nil {
		f.State = domainStateName(golibvirt.DomainState(s))
	}
	m, stamped, err := readMetadata(l, d)
	switch {
	case err != nil:
		f.Detail = err.Error()
	case !stamped:
		f.Detail = "no crimux metadata"
	case m.Instance == r.opts.Instance:
		return vmtypes.ForeignResource{}, m, false, nil // this crimux's: the collector adopts or removes it
	default:
		f.Instance = m.Instance
		f.Detail = fmt.Sprintf("pod %s/%s, sandbox %s", m.PodNamespace, m.PodName, m.SandboxID)
	}
	return f, m, true, nil
}

// ownsContainer tells whether this crimux has a record of container id,
// in whatever state (being created or removed included).
func (r *Runtime) ownsContainer(id string) (bool, error) {
	_, err := get[containerRecord](r.store, bucketContainers, id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// readMetadata reads crimux's stamp from a domain; ok is false for a
// domain without one.
func readMetadata(l foreignLibvirt, d golibvirt.Domain) (m vm.Metadata, ok bool, err error) {
	x, err := l.DomainGetXMLDesc(d, 0)
	if err != nil {
		return m, false, fmt.Errorf("domain %q: read its XML: %w", d.Name, classify(err))
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return m, false, fmt.Errorf("domain %q: parse its XML: %w", d.Name, err)
	}
	m, ok = vm.ParseMetadata(&dom)
	return m, ok, nil
}

// foreignDom is a domain checked to be foreign.
type foreignDom struct {
	dom     golibvirt.Domain
	meta    vm.Metadata
	stamped bool
}

// foreignDomain finds domain name and makes sure it is foreign: named
// crimux-<id>, no record of this crimux's, no stamp of this crimux's.
func (r *Runtime) foreignDomain(l foreignLibvirt, name string) (foreignDom, error) {
	id, crimux := strings.CutPrefix(name, vm.DomainName(""))
	if !crimux || id == "" || strings.ContainsAny(id, "/\x00") {
		return foreignDom{}, errdefs.Invalid("name", "domain %q is not a crimux domain (crimux-<container ID>)", name)
	}
	if owned, err := r.ownsContainer(id); err != nil {
		return foreignDom{}, err
	} else if owned {
		return foreignDom{}, fmt.Errorf("domain %q is this crimux's VM %s: not foreign: %w", name, id, errdefs.ErrFailedPrecondition)
	}
	d, err := l.DomainLookupByName(name)
	if golibvirt.IsNotFound(err) {
		return foreignDom{}, fmt.Errorf("domain %q: libvirt has no domain of that name: %w", name, errdefs.ErrNotFound)
	} else if err != nil {
		return foreignDom{}, fmt.Errorf("domain %q: %w", name, classify(err))
	}
	m, stamped, err := readMetadata(l, d)
	if err != nil {
		return foreignDom{}, err
	}
	if stamped && m.Instance == r.opts.Instance {
		return foreignDom{}, fmt.Errorf("domain %q carries this crimux's identity: not foreign: %w", name, errdefs.ErrFailedPrecondition)
	}
	return foreignDom{dom: d, meta: m, stamped: stamped}, nil
}

// adoptForeignDomain stamps a foreign domain with this crimux's identity
// and returns its metadata as it was.
func (r *Runtime) adoptForeignDomain(l foreignLibvirt, name string) (vm.Metadata, error) {
	f, err := r.foreignDomain(l, name)
	if err != nil {
		return vm.Metadata{}, err
	}
	m := f.meta
	switch {
	case !f.stamped:
		return m, fmt.Errorf("domain %q has no crimux metadata (pod, sandbox and container IDs): it can be deleted, not adopted: %w",
			name, errdefs.ErrFailedPrecondition)
	case vm.DomainName(m.ContainerID) != name:
		return m, fmt.Errorf("domain %q: its crimux metadata names container %q, not this domain's: not adopted: %w",
			name, m.ContainerID, errdefs.ErrFailedPrecondition)
	}
	if _, err := r.store.sandbox(m.SandboxID); err == nil {
		return m, fmt.Errorf("domain %q: its pod sandbox %s is one of this crimux's: not adopted: %w", name, m.SandboxID, errdefs.ErrFailedPrecondition)
	}
	if err := setInstance(l, f.dom, m, r.opts.Instance); err != nil {
		return m, fmt.Errorf("domain %q: rewrite its crimux metadata: %w", name, classify(err))
	}
	r.log.Warn("foreign domain adopted on an operator's command", "domain", name, "from_instance", m.Instance,
		"pod", m.PodNamespace+"/"+m.PodName, "sandbox", m.SandboxID)
	return m, nil
}

// stampXML is crimux's metadata element naming instance, without its
// namespace declaration: DomainSetMetadata puts it in metadataNS.
func stampXML(m vm.Metadata, instance string) (string, error) {
	m.Instance = instance
	b, err := xml.Marshal(m)
	if err != nil {
		return "", err
	}
	return strings.Replace(string(b), ` xmlns="`+metadataNS+`"`, "", 1), nil
}

// setInstance rewrites the instance in a domain's crimux metadata, in its
// persistent definition and, while it runs, its live one; the rest of
// the domain is left as it is.
func setInstance(l foreignLibvirt, d golibvirt.Domain, m vm.Metadata, instance string) error {
	x, err := stampXML(m, instance)
	if err != nil {
		return err
	}
	flags := golibvirt.DomainAffectCurrent
	if p, err := l.DomainIsPersistent(d); err != nil {
		return err
	} else if p == 1 {
		flags |= golibvirt.DomainAffectConfig
	}
	if a, err := l.DomainIsActive(d); err != nil {
		return err
	} else if a == 1 {
		flags |= golibvirt.DomainAffectLive
	}
	return l.DomainSetMetadata(d, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{x},
		golibvirt.OptString{"crimux"}, golibvirt.OptString{metadataNS}, flags)
}

// deleteForeignDomain removes a foreign domain with remove (destroy and
// undefine), then the cgroup its qemu ran in, if it ran.
func (r *Runtime) deleteForeignDomain(l foreignLibvirt, name string, remove func(string) error) error {
	f, err := r.foreignDomain(l, name)
	if err != nil {
		return err
	}
	parent := cgroupParentOfDomain(name)
	if err := remove(name); err != nil {
		return fmt.Errorf("delete domain %q: %w", name, err)
	}
	if parent != "" && r.cgroups != nil {
		if err := r.cgroups.Remove(VMCgroup{Parent: parent, Name: name}); err != nil {
			r.log.Warn("cgroup of a deleted foreign domain not removed", "domain", name, "err", err)
		}
	}
	r.log.Warn("foreign domain deleted on an operator's command", "domain", name, "instance", f.meta.Instance,
		"pod", f.meta.PodNamespace+"/"+f.meta.PodName, "sandbox", f.meta.SandboxID)
	r.counters.GCRemoved("foreign_domain", 1)
	return nil
}
