package gc

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
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

// ListForeign lists the foreign domains, then the foreign namespaces.
// It needs libvirtd (Unavailable while it is down).
func (r *Collector) ListForeign(ctx context.Context) ([]vmtypes.ForeignResource, error) {
	l, err := r.Conn.Get()
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
func (r *Collector) AdoptForeign(ctx context.Context, kind, name string) error {
	switch kind {
	case vmtypes.ForeignDomain:
		l, err := r.Conn.Get()
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
		l, err := r.Conn.Get()
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
func (r *Collector) DeleteForeign(ctx context.Context, kind, name string) error {
	switch kind {
	case vmtypes.ForeignDomain:
		l, err := r.Conn.Get()
		if err != nil {
			return err
		}
		return r.deleteForeignDomain(l, name, func(n string) error { return core.DestroyAndUndefine(l, n) })
	case vmtypes.ForeignNetns:
		return r.deleteForeignNetns(ctx, name)
	}
	return badForeignKind(kind)
}

func badForeignKind(kind string) error {
	return errdefs.Invalid("kind", "%q is not a kind of foreign resource: want %s or %s", kind, vmtypes.ForeignDomain, vmtypes.ForeignNetns)
}

func (r *Collector) listForeign(l virt.Libvirt) ([]vmtypes.ForeignResource, error) {
	doms, err := l.ListAll()
	if err != nil {
		return nil, fmt.Errorf("list libvirt domains: %w", err)
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
func (r *Collector) describeDomain(l virt.Libvirt, d virt.Domain) (vmtypes.ForeignResource, vm.Metadata, bool, error) {
	var m vm.Metadata
	id, crimux := strings.CutPrefix(d.Name, vm.DomainName(""))
	if !crimux || id == "" {
		return vmtypes.ForeignResource{}, m, false, nil
	}
	if owned, err := r.ownsContainer(id); err != nil || owned {
		return vmtypes.ForeignResource{}, m, false, err
	}
	f := vmtypes.ForeignResource{Kind: vmtypes.ForeignDomain, Name: d.Name, State: "unknown"}
	if s, err := l.State(d); err == nil {
		f.State = s.String()
	}
	m, stamped, err := readMetadata(l, d)
	switch {
	case err != nil:
		f.Detail = err.Error()
	case !stamped:
		f.Detail = "no crimux metadata"
	case m.Instance == r.Opts.Instance:
		return vmtypes.ForeignResource{}, m, false, nil // this crimux's: the collector adopts or removes it
	default:
		f.Instance = m.Instance
		f.Detail = fmt.Sprintf("pod %s/%s, sandbox %s", m.PodNamespace, m.PodName, m.SandboxID)
	}
	return f, m, true, nil
}

// ownsContainer tells whether this crimux has a record of container id,
// in whatever state (being created or removed included).
func (r *Collector) ownsContainer(id string) (bool, error) {
	_, err := r.Store.AnyContainer(id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// readMetadata reads crimux's stamp from a domain; ok is false for a
// domain without one.
func readMetadata(l virt.Libvirt, d virt.Domain) (m vm.Metadata, ok bool, err error) {
	x, err := l.XML(d)
	if err != nil {
		return m, false, fmt.Errorf("domain %q: read its XML: %w", d.Name, err)
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
	dom     virt.Domain
	meta    vm.Metadata
	stamped bool
}

// foreignDomain finds domain name and makes sure it is foreign: named
// crimux-<id>, no record of this crimux's, no stamp of this crimux's.
func (r *Collector) foreignDomain(l virt.Libvirt, name string) (foreignDom, error) {
	id, crimux := strings.CutPrefix(name, vm.DomainName(""))
	if !crimux || id == "" || strings.ContainsAny(id, "/\x00") {
		return foreignDom{}, errdefs.Invalid("name", "domain %q is not a crimux domain (crimux-<container ID>)", name)
	}
	if owned, err := r.ownsContainer(id); err != nil {
		return foreignDom{}, err
	} else if owned {
		return foreignDom{}, fmt.Errorf("domain %q is this crimux's VM %s: not foreign: %w", name, id, errdefs.ErrFailedPrecondition)
	}
	d, err := l.Lookup(name)
	if errdefs.IsNotFound(err) {
		return foreignDom{}, fmt.Errorf("domain %q: libvirt has no domain of that name: %w", name, errdefs.ErrNotFound)
	} else if err != nil {
		return foreignDom{}, fmt.Errorf("domain %q: %w", name, err)
	}
	m, stamped, err := readMetadata(l, d)
	if err != nil {
		return foreignDom{}, err
	}
	if stamped && m.Instance == r.Opts.Instance {
		return foreignDom{}, fmt.Errorf("domain %q carries this crimux's identity: not foreign: %w", name, errdefs.ErrFailedPrecondition)
	}
	return foreignDom{dom: d, meta: m, stamped: stamped}, nil
}
