package rebuild

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// proof is what a rebuild writes, and what it leaves alone.
type proof struct {
	sandboxes  map[string]*store.Sandbox
	containers []provenVM
	leftAlone  []LeftAlone
}

// provenVM is a VM record proven by its domain.
type provenVM struct {
	rec     *store.Container
	running bool
}

// prove keeps every record a domain and its directories prove, and
// reports every domain and directory that proves none.
func prove(ev evidence, stateDir, instance string) *proof {
	p := &proof{sandboxes: map[string]*store.Sandbox{}}
	domainOf := map[string]bool{}  // VM IDs with a crimux-named domain
	podLeft := map[string]string{} // sandbox ID -> a domain of it left alone
	for _, d := range ev.domains {
		domainOf[strings.TrimPrefix(d.name, vm.DomainName(""))] = true
		sb, c, why := proveDomain(d, stateDir, instance)
		if why != "" {
			p.leave("domain", d.name, why, domainThen(d, instance))
			if d.stamped && d.meta.SandboxID != "" {
				podLeft[d.meta.SandboxID] = d.name
			}
			continue
		}
		p.sandboxes[sb.ID] = sb
		p.containers = append(p.containers, provenVM{rec: c, running: d.running})
	}
	for _, name := range ev.vmDirs {
		if !domainOf[name] {
			p.leave("vm-dir", filepath.Join(stateDir, vmsDir, name), "libvirt has no domain "+vm.DomainName(name), thenRemoved)
		}
	}
	for _, name := range ev.podDirs {
		dir := filepath.Join(stateDir, podsDir, name)
		switch {
		case p.sandboxes[name] != nil:
		case podLeft[name] != "":
			p.leave("pod-dir", dir, "its VM's domain "+podLeft[name]+" was left alone", "crimux keeps it if it adopts that domain, else removes it (the pod's root disk with it)")
		default:
			p.leave("pod-dir", dir, "no libvirt domain is of this pod", "crimux removes it (the pod's root disk with it)")
		}
	}
	return p
}

// What crimux does, once it runs, with what a rebuild left alone: as with
// anything it has no record of (the collector, runtimes/libvirt/gc).
const (
	thenForeign = "crimux never touches it (crimuxctl gc lists it)"
	thenAdopted = "crimux adopts it, running, with a bare record: kubelet, which does not know that pod, makes it again"
	thenRemoved = "crimux removes it"
)

// domainThen is what crimux does with a domain left alone.
func domainThen(d domainEvidence, instance string) string {
	switch {
	case d.err != nil:
		return "crimux leaves it while its definition cannot be read"
	case !ours(d, instance):
		return thenForeign
	case d.running:
		return thenAdopted
	}
	return "crimux removes it (it is shut off) and its VM's directory"
}

// ours: the domain is this crimux's by the collector's rule (gc's
// mintedBy): stamped with its identity and IDs crimux mints, its own
// container's among them. Any other, crimux never touches.
func ours(d domainEvidence, instance string) bool {
	m := d.meta
	return d.stamped && m.Instance == instance && store.ValidID(m.ContainerID) && store.ValidID(m.SandboxID) &&
		vm.DomainName(m.ContainerID) == d.name
}

func (p *proof) leave(kind, name, why, then string) {
	p.leftAlone = append(p.leftAlone, LeftAlone{Kind: kind, Name: name, Why: why, Then: then})
}

// report says what p rebuilds and leaves alone.
func (p *proof) report(rep *Report) {
	for _, sb := range p.sandboxes {
		m := sb.Config.GetMetadata()
		rep.Sandboxes = append(rep.Sandboxes, Rebuilt{ID: sb.ID, Pod: m.GetNamespace() + "/" + m.GetName(), State: sb.State.String()})
	}
	sort.Slice(rep.Sandboxes, func(i, j int) bool { return rep.Sandboxes[i].ID < rep.Sandboxes[j].ID })
	for _, c := range p.containers {
		m := p.sandboxes[c.rec.SandboxID].Config.GetMetadata()
		state := c.rec.State.String() + ", domain shut off"
		if c.running {
			state = c.rec.State.String() + ", domain running"
		}
		rep.Containers = append(rep.Containers, Rebuilt{ID: c.rec.ID, Pod: m.GetNamespace() + "/" + m.GetName(), State: state})
	}
	rep.LeftAlone = append(rep.LeftAlone, p.leftAlone...)
}

// proveDomain returns the records domain d proves, or why it proves none.
func proveDomain(d domainEvidence, stateDir, instance string) (*store.Sandbox, *store.Container, string) {
	m := d.meta
	switch {
	case d.err != nil:
		return nil, nil, "its definition cannot be read: " + d.err.Error()
	case !d.stamped:
		return nil, nil, "it has no crimux metadata (pod, sandbox and container IDs)"
	case m.Instance != instance:
		return nil, nil, fmt.Sprintf("it is stamped by another crimux identity, %q (this state dir's is %q)", m.Instance, instance)
	case !ours(d, instance):
		return nil, nil, fmt.Sprintf("its metadata names IDs crimux never mints for it (sandbox %q, container %q)", m.SandboxID, m.ContainerID)
	}
	vmDir := filepath.Join(stateDir, vmsDir, m.ContainerID)
	podDir := filepath.Join(stateDir, podsDir, m.SandboxID)
	c, err := store.ReadContainerCopy(store.ContainerCopyPath(vmDir))
	if err != nil {
		return nil, nil, copyWhy("VM", store.ContainerCopyPath(vmDir), err)
	}
	if why := agreeVM(d, c, vmDir); why != "" {
		return nil, nil, why
	}
	sb, err := store.ReadSandboxCopy(store.SandboxCopyPath(stateDir, m.SandboxID))
	if err != nil {
		return nil, nil, copyWhy("pod", store.SandboxCopyPath(stateDir, m.SandboxID), err)
	}
	if why := agreePod(d, sb); why != "" {
		return nil, nil, why
	}
	if why := agreeFiles(d, sb, c, stateDir, vmDir, podDir); why != "" {
		return nil, nil, why
	}
	return sb, c, ""
}

// copyWhy says why the record copy at path proves nothing.
func copyWhy(what, path string, err error) string {
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("its %s's record copy cannot be used: %v", what, err)
	}
	dir := filepath.Dir(path)
	if _, derr := os.Lstat(dir); errors.Is(derr, os.ErrNotExist) {
		return fmt.Sprintf("its %s's directory %s does not exist", what, dir)
	}
	return fmt.Sprintf("its %s's directory %s holds no record copy (%s): made by a crimux before record copies, or being created or removed",
		what, dir, filepath.Base(path))
}

// agreeVM checks that the domain's metadata and the VM's record copy
// name the same VM, pod, domain and directory.
func agreeVM(d domainEvidence, c *store.Container, vmDir string) string {
	m := d.meta
	switch {
	case c.ID != m.ContainerID || c.SandboxID != m.SandboxID || c.Domain != d.name:
		return fmt.Sprintf("its VM's record copy is container %s of pod sandbox %s in domain %s; the domain's metadata says container %s of pod sandbox %s",
			c.ID, c.SandboxID, c.Domain, m.ContainerID, m.SandboxID)
	case filepath.Clean(c.Dir) != vmDir:
		return fmt.Sprintf("its VM's record copy names the directory %s, not %s (was the state dir moved?)", c.Dir, vmDir)
	}
	return ""
}

// agreePod checks that the domain's metadata and the pod's record copy
// name the same pod.
func agreePod(d domainEvidence, sb *store.Sandbox) string {
	m, pm := d.meta, sb.Config.GetMetadata()
	switch {
	case sb.ID != m.SandboxID:
		return fmt.Sprintf("its pod's record copy is pod sandbox %s, the domain's metadata says %s", sb.ID, m.SandboxID)
	case pm.GetUid() != m.PodUID || pm.GetName() != m.PodName || pm.GetNamespace() != m.PodNamespace:
		return fmt.Sprintf("its pod's record copy is pod %s/%s (uid %s), the domain's metadata says %s/%s (uid %s)",
			pm.GetNamespace(), pm.GetName(), pm.GetUid(), m.PodNamespace, m.PodName, m.PodUID)
	}
	return ""
}

// agreeFiles checks that the domain uses its VM's directory, no other
// VM's or pod's file, the root disk the records name, and runs as the
// pod's identity.
func agreeFiles(d domainEvidence, sb *store.Sandbox, c *store.Container, stateDir, vmDir, podDir string) string {
	inVMDir := false
	for _, p := range d.paths {
		switch {
		case within(p, vmDir):
			inVMDir = true
		case within(p, podDir):
		case within(p, stateDir):
			return fmt.Sprintf("it uses %s, a file of another VM or pod", p)
		}
	}
	if !inVMDir {
		return fmt.Sprintf("it uses no file of its VM's directory %s", vmDir)
	}
	root := ""
	switch {
	case c.RootVolume != nil:
		root = c.RootVolume.Path
	case sb.Disk != nil && sb.ContainerID == c.ID:
		root = sb.Disk.Path
	}
	if root != "" && !slices.Contains(d.paths, filepath.Clean(root)) {
		return fmt.Sprintf("its records give it the root disk %s, which the domain does not use", root)
	}
	want := ""
	if sb.Identity != nil {
		want = fmt.Sprintf("+%d:+%d", sb.Identity.UID, sb.Identity.GID)
	}
	if got := strings.Join(d.dacLabels, ","); got != want {
		return fmt.Sprintf("its pod's record copy gives it the identity %q, the domain runs as %q", want, got)
	}
	return ""
}

// within: path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
