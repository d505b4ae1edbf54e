package gc

import (
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// adoptForeignDomain stamps a foreign domain with this crimux's identity
// and returns its metadata as it was.
func (r *Collector) adoptForeignDomain(l virt.Libvirt, name string) (vm.Metadata, error) {
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
	case !mintedBy(m, name):
		return m, fmt.Errorf("domain %q: its crimux metadata names IDs crimux never mints (sandbox %q, container %q): not adopted: %w",
			name, m.SandboxID, m.ContainerID, errdefs.ErrFailedPrecondition)
	}
	if _, err := r.Store.Sandbox(m.SandboxID); !errdefs.IsNotFound(err) {
		return m, fmt.Errorf("domain %q: its pod sandbox %s is one of this crimux's: not adopted: %w", name, m.SandboxID, errdefs.ErrFailedPrecondition)
	}
	if err := setInstance(l, f.dom, m, r.Opts.Instance); err != nil {
		return m, fmt.Errorf("domain %q: rewrite its crimux metadata: %w", name, err)
	}
	r.Log.Warn("foreign domain adopted on an operator's command", "domain", name, "from_instance", m.Instance,
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
func setInstance(l virt.Libvirt, d virt.Domain, m vm.Metadata, instance string) error {
	x, err := stampXML(m, instance)
	if err != nil {
		return err
	}
	return l.SetMetadata(d, x, "crimux", metadataNS)
}

// deleteForeignDomain removes a foreign domain with remove (destroy and
// undefine), then the cgroup its qemu ran in, if it ran.
func (r *Collector) deleteForeignDomain(l virt.Libvirt, name string, remove func(string) error) error {
	f, err := r.foreignDomain(l, name)
	if err != nil {
		return err
	}
	parent := cgroupParentOfDomain(name)
	if err := remove(name); err != nil {
		return fmt.Errorf("delete domain %q: %w", name, err)
	}
	if parent != "" && r.Cgroups != nil {
		if err := r.Cgroups.Remove(core.VMCgroup{Parent: parent, Name: name}); err != nil {
			r.Log.Warn("cgroup of a deleted foreign domain not removed", "domain", name, "err", err)
		}
	}
	r.Log.Warn("foreign domain deleted on an operator's command", "domain", name, "instance", f.meta.Instance,
		"pod", f.meta.PodNamespace+"/"+f.meta.PodName, "sandbox", f.meta.SandboxID)
	r.Counters.GCRemoved("foreign_domain", 1)
	return nil
}
