package gc

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// collectDomains looks at every crimux-named domain libvirt has.
// It returns the IDs of the crimux-named domains that are still there
// after the pass: their directories are not the collector's to remove.
// Only a record that is certainly missing makes a domain an orphan: one
// the store cannot read (a damaged record, a downgrade) is left alone.
// ok is false when libvirt could not list its domains: then nothing
// tells which directories are a VM's.
func (r *Collector) collectDomains(l virt.Libvirt, rep *GCReport) (present map[string]bool, ok bool) {
	present = map[string]bool{}
	doms, err := l.ListAll()
	if err != nil {
		r.Log.Warn("cannot list libvirt's domains: no VM directory collected in this pass", "err", err)
		return present, false
	}
	prefix := vm.DomainName("")
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		if _, ok := template.KeyOfDomain(d.Name); ok {
			r.collectTemplateDomain(l, d, rep)
			continue
		}
		id := strings.TrimPrefix(d.Name, prefix)
		present[id] = true
		if _, err := r.Store.AnyContainer(id); err == nil {
			continue // owned (live or being removed)
		} else if !errdefs.IsNotFound(err) {
			rep.Pending++
			r.Log.Warn("the record of a VM cannot be read: its domain is left alone", "domain", d.Name, "err", err)
			continue
		}
		if r.collectDomain(l, d, rep) {
			delete(present, id)
		}
	}
	return present, true
}

// collectDomain adopts or removes a crimux-named domain without a record,
// or reports it as foreign; removed says whether it is gone.
func (r *Collector) collectDomain(l virt.Libvirt, d virt.Domain, rep *GCReport) (removed bool) {
	meta, ok := domainMetadata(l, d)
	if !ok || meta.Instance != r.Opts.Instance || !mintedBy(meta, d.Name) {
		rep.Foreign = append(rep.Foreign, d.Name)
		return false
	}
	state, err := l.State(d)
	if err != nil {
		rep.Pending++
		r.Log.Warn("cannot tell whether an unrecorded VM of this crimux runs: left for the next pass", "domain", d.Name, "err", err)
		return false
	}
	if state.Active() {
		if err := r.adopt(d.Name, meta); err != nil {
			rep.Pending++
			r.Log.Warn("a running VM of this crimux not adopted yet; its files are kept", "domain", d.Name, "err", err)
			return false
		}
		rep.Adopted++
		return false
	}
	if core.DestroyAndUndefine(l, d.Name) == nil {
		rep.Domains++
		return true
	}
	return false
}

// mintedBy reports whether a domain's metadata names IDs crimux mints,
// its own container's among them: IDs read back from libvirt name files,
// locks and records, so they are checked as strictly as any from CRI (a
// domain stamped with container ID "../../../etc" would make its
// directory /etc).
func mintedBy(m vm.Metadata, domain string) bool {
	return store.ValidID(m.ContainerID) && store.ValidID(m.SandboxID) && vm.DomainName(m.ContainerID) == domain
}

// adopt takes a running domain of ours back into the store, so it is
// listed (kubelet then stops and removes a pod it no longer knows)
// instead of running unseen forever.
func (r *Collector) adopt(domain string, m vm.Metadata) error {
	defer r.Locks.Lock(m.SandboxID)()
	if sb, err := r.Store.Sandbox(m.SandboxID); err != nil && !errdefs.IsNotFound(err) {
		return err // unreadable: never overwritten
	} else if err == nil && sb.ContainerID == "" {
		sb.ContainerID = m.ContainerID // its VM, found again
		if err := r.Store.PutSandbox(sb); err != nil {
			return err
		}
	} else if err != nil {
		sb := &store.Sandbox{ID: m.SandboxID, Handler: "vm", CreatedAt: time.Now().UnixNano(),
			State: runtimeapi.PodSandboxState_SANDBOX_READY, ContainerID: m.ContainerID,
			Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{
				Name: m.PodName, Namespace: m.PodNamespace, Uid: m.PodUID}}}
		r.adoptNetwork(sb)
		if err := r.Store.PutSandbox(sb); err != nil {
			return err
		}
	}
	now := time.Now().UnixNano()
	c := &store.Container{ID: m.ContainerID, SandboxID: m.SandboxID, Domain: domain, Dir: r.VMDir(m.ContainerID),
		CgroupParent: cgroupParentOfDomain(domain),
		Accel:        r.Accel, CreatedAt: now, StartedAt: now, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Adopted: true,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}}
	r.Log.Warn("adopted a running VM of this crimux that had no record", "domain", domain, "pod", m.PodNamespace+"/"+m.PodName)
	return r.Store.PutContainer(c)
}

// domainMetadata reads crimux's stamp from a domain.
func domainMetadata(l virt.Libvirt, d virt.Domain) (vm.Metadata, bool) {
	x, err := l.XML(d)
	if err != nil {
		return vm.Metadata{}, false
	}
	var dom libvirtxml.Domain
	if dom.Unmarshal(x) != nil {
		return vm.Metadata{}, false
	}
	return vm.ParseMetadata(&dom)
}

// collectDirs removes VM directories no record owns.
// A directory is removed only when no record names it (certainly: an
// unreadable record keeps it) and no domain of its name is left.
func (r *Collector) collectDirs(rep *GCReport, present map[string]bool) {
	entries, err := os.ReadDir(filepath.Join(r.Opts.StateDir, "vms"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if present[e.Name()] {
			continue
		}
		if _, err := r.Store.AnyContainer(e.Name()); !errdefs.IsNotFound(err) {
			continue
		}
		if rootvol.RemoveVMDir(filepath.Join(r.Opts.StateDir, "vms", e.Name())) == nil {
			rep.Dirs++
		}
	}
}

// cgroupParentOfDomain finds the pod cgroup a running domain's qemu was
// placed under (its cgroup is <parent>/<domain>), from libvirt's pid file.
func cgroupParentOfDomain(domain string) string {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", domain+".pid"))
	if err != nil {
		return ""
	}
	cg, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "cgroup"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && filepath.Base(parts[2]) == domain {
			return filepath.Dir(parts[2])
		}
	}
	return ""
}
