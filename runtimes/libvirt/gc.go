package libvirt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
)

// The collector converges what exists on what the store says should:
// it finishes teardowns that failed or were cut short (records Removing,
// or Creating since before the last start; pod networks too, see
// gc_network.go), adopts running domains that
// carry crimux's identity but have no record (a wiped state dir), deletes
// stopped ones and VM directories nobody owns, and reports — never
// touches — domains of another crimux identity. It runs when libvirtd
// (re)connects and every gcInterval.

// gcInterval is the period of the collector.
const gcInterval = time.Minute

// staleCreate is how old a record still Creating must be before a
// periodic pass treats it as abandoned (the first pass after a start
// treats every one so: no call survived the restart).
const staleCreate = 10 * time.Minute

// GCReport counts what one collector pass did.
type GCReport struct {
	Domains, Dirs, Records int // removed
	Adopted                int
	Foreign                []string // domains of another crimux identity, left alone
	Pending                int      // teardowns still failing
	// Networks counts pod networks removed (CNI DEL and namespace);
	// ForeignNetns names namespaces of another identity, left alone.
	Networks     int
	ForeignNetns []string
}

func (r *Runtime) runCollector(ctx context.Context) {
	t := time.NewTicker(gcInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.CollectGarbage(ctx, false)
		}
	}
}

// CollectGarbage runs one collector pass. afterStart treats every
// record still Creating as abandoned. Pod networks the store records as
// going are finished even while libvirtd is away; orphan namespaces only
// once libvirt said which VMs run (a VM adopted back keeps its network).
func (r *Runtime) CollectGarbage(ctx context.Context, afterStart bool) GCReport {
	var rep GCReport
	l, err := r.conn.get()
	if err == nil {
		r.finishTeardowns(&rep, afterStart)
		r.collectDomains(l, &rep)
		r.collectDirs(&rep)
	}
	r.collectNetworks(&rep, afterStart, err == nil)
	if rep.Domains+rep.Dirs+rep.Records+rep.Adopted+rep.Networks > 0 || len(rep.Foreign)+len(rep.ForeignNetns) > 0 || rep.Pending > 0 {
		r.log.Info("garbage collection", "domains_removed", rep.Domains, "dirs_removed", rep.Dirs,
			"records_removed", rep.Records, "networks_removed", rep.Networks, "adopted", rep.Adopted,
			"foreign", rep.Foreign, "foreign_netns", rep.ForeignNetns, "pending", rep.Pending)
	}
	r.countGC(rep)
	return rep
}

// finishTeardowns retries every teardown the store still records.
func (r *Runtime) finishTeardowns(rep *GCReport, afterStart bool) {
	recs, err := r.store.containers()
	if err != nil {
		return
	}
	for _, c := range recs {
		abandoned := c.Creating && (afterStart || time.Since(time.Unix(0, c.CreatedAt)) > staleCreate)
		if !c.Removing && !abandoned {
			continue
		}
		unlock := r.locks.lock(c.SandboxID)
		err := r.teardown(c)
		unlock()
		if err != nil {
			rep.Pending++
			r.log.Warn("teardown still failing", "container", c.ID, "err", err)
			continue
		}
		rep.Records++
	}
}

// collectDomains looks at every crimux-named domain libvirt has.
func (r *Runtime) collectDomains(l *golibvirt.Libvirt, rep *GCReport) {
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return
	}
	prefix := vm.DomainName("")
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		id := strings.TrimPrefix(d.Name, prefix)
		if _, err := get[containerRecord](r.store, bucketContainers, id); err == nil {
			continue // owned (live or being removed)
		}
		meta, ok := domainMetadata(l, d)
		if !ok || meta.Instance != r.opts.Instance {
			rep.Foreign = append(rep.Foreign, d.Name)
			continue
		}
		off, err := isShutoff(l, d)
		if err == nil && !off {
			if r.adopt(d.Name, meta) == nil {
				rep.Adopted++
			}
			continue
		}
		if destroyAndUndefine(l, d.Name) == nil {
			rep.Domains++
		}
	}
}

// adopt takes a running domain of ours back into the store, so it is
// listed (kubelet then stops and removes a pod it no longer knows)
// instead of running unseen forever.
func (r *Runtime) adopt(domain string, m vm.Metadata) error {
	defer r.locks.lock(m.SandboxID)()
	if _, err := r.store.sandbox(m.SandboxID); err != nil {
		sb := &sandboxRecord{ID: m.SandboxID, Handler: "vm", CreatedAt: time.Now().UnixNano(),
			State: runtimeapi.PodSandboxState_SANDBOX_READY, ContainerID: m.ContainerID,
			Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{
				Name: m.PodName, Namespace: m.PodNamespace, Uid: m.PodUID}}}
		r.adoptNetwork(sb)
		if err := r.store.putSandbox(sb); err != nil {
			return err
		}
	}
	now := time.Now().UnixNano()
	c := &containerRecord{ID: m.ContainerID, SandboxID: m.SandboxID, Domain: domain, Dir: r.vmDir(m.ContainerID),
		CgroupParent: cgroupParentOfDomain(domain),
		Accel:        r.accel, CreatedAt: now, StartedAt: now, State: runtimeapi.ContainerState_CONTAINER_RUNNING, Adopted: true,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}}
	r.log.Warn("adopted a running VM of this crimux that had no record", "domain", domain, "pod", m.PodNamespace+"/"+m.PodName)
	return r.store.putContainer(c)
}

// domainMetadata reads crimux's stamp from a domain.
func domainMetadata(l *golibvirt.Libvirt, d golibvirt.Domain) (vm.Metadata, bool) {
	x, err := l.DomainGetXMLDesc(d, 0)
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
func (r *Runtime) collectDirs(rep *GCReport) {
	entries, err := os.ReadDir(filepath.Join(r.opts.StateDir, "vms"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := get[containerRecord](r.store, bucketContainers, e.Name()); err == nil {
			continue
		}
		if os.RemoveAll(filepath.Join(r.opts.StateDir, "vms", e.Name())) == nil {
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
