package libvirt

// The VM API's operations (vmops_*.go): what a VM can do that a container
// cannot — power states, reboot, snapshots. The vmapi package serves them
// over gRPC; here they are plain methods of the runtime, addressed by the
// runtime's own pod or container IDs (without the "vm--" prefix), and each
// runs under the pod's lock, like every CRI call on the same VM.
//
// The power state is the user's choice, kept in the container record. The
// CRI container stays CONTAINER_RUNNING, with the same ID, in every one:
//
//	Running <--suspend / resume--> Paused
//	Running|Paused --ACPI power button, deadline, destroy--> Shutdown
//	Running|Paused --managed save (memory to disk)--> Hibernate
//	Shutdown --create: boots the same overlay disk--> Running|Paused
//	Hibernate --create: restores the saved memory--> Running|Paused
//
// A stop the user asked for is no exit: the power state is recorded before
// libvirt acts, so the lifecycle event of that stop (events.go) and the
// resync after a reconnect leave the container running. A guest that powers
// itself off while its power state is Running still ends the container.
// After every operation, done or failed, the power state is settled from
// what libvirt reports, so a half-done operation leaves a VM the API can
// act on again.

import (
	"context"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"sort"

	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// ListVMs reports every VM pod, with what libvirt says of its domain where
// libvirtd answers.
func (r *Runtime) ListVMs(ctx context.Context) ([]vmtypes.VMInfo, error) {
	sbs, err := r.store.sandboxes()
	if err != nil {
		return nil, err
	}
	out := make([]vmtypes.VMInfo, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, r.vmInfo(sb))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].CreatedAt < out[j].CreatedAt
	})
	return out, nil
}

// GetVM reports the VM of a pod sandbox or container ID.
func (r *Runtime) GetVM(ctx context.Context, id string) (vmtypes.VMInfo, error) {
	sbID, err := r.sandboxOf(id)
	if err != nil {
		return vmtypes.VMInfo{}, err
	}
	sb, err := r.store.sandbox(sbID)
	if err != nil {
		return vmtypes.VMInfo{}, err
	}
	return r.vmInfo(sb), nil
}

func (r *Runtime) vmInfo(sb *sandboxRecord) vmtypes.VMInfo {
	info := vmtypes.VMInfo{
		SandboxID: sb.ID, Namespace: sb.Config.GetMetadata().GetNamespace(), Name: sb.Config.GetMetadata().GetName(),
		PodState: sb.State, CreatedAt: sb.CreatedAt, DomainState: "unknown",
	}
	if sb.ContainerID == "" {
		return info
	}
	c, err := r.store.container(sb.ContainerID)
	if err != nil {
		return info
	}
	info.ContainerID, info.ContainerState, info.PowerState = c.ID, c.State, c.powerState()
	info.Domain, info.Accel, info.VCPUs, info.MemoryMiB = c.Domain, c.Accel, c.VCPUs, c.MemoryMiB
	info.Image, info.CreatedAt, info.StartedAt = c.Config.GetImage().GetImage(), c.CreatedAt, c.StartedAt
	l, err := r.conn.get()
	if err != nil {
		return info
	}
	dom, err := l.DomainLookupByName(c.Domain)
	if err != nil {
		if golibvirt.IsNotFound(err) {
			info.DomainState = "undefined"
		}
		return info
	}
	if v, err := observe(l, dom); err == nil {
		info.DomainState, info.ManagedSave = domainStateName(v.state), v.managedSave
	}
	info.Snapshots, _ = listSnapshots(l, dom)
	return info
}

// sandboxOf resolves a pod sandbox or container ID to its pod sandbox ID.
func (r *Runtime) sandboxOf(id string) (string, error) {
	if c, err := r.store.container(id); err == nil {
		return c.SandboxID, nil
	} else if !errdefs.IsNotFound(err) {
		return "", err
	}
	sb, err := r.store.sandbox(id)
	if errdefs.IsNotFound(err) {
		return "", fmt.Errorf("no VM pod or VM container has ID %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// lockVM takes the lock of the VM's pod and loads its container (the VM)
// under it.
func (r *Runtime) lockVM(id string) (*containerRecord, func(), error) {
	sbID, err := r.sandboxOf(id)
	if err != nil {
		return nil, nil, err
	}
	unlock := r.locks.lock(sbID)
	c, err := r.vmOfSandbox(sbID)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return c, unlock, nil
}

func (r *Runtime) vmOfSandbox(sbID string) (*containerRecord, error) {
	sb, err := r.store.sandbox(sbID)
	if err != nil {
		return nil, err
	}
	if sb.ContainerID == "" {
		return nil, fmt.Errorf("VM pod %q has no VM: its container is not created: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	return r.store.container(sb.ContainerID)
}

// requireRunning refuses a VM whose CRI container is not running: the VM
// API powers, reboots and snapshots only VMs kubelet has started.
func requireRunning(c *containerRecord) error {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("the VM's container is %s, not CONTAINER_RUNNING: %w", c.State, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// domainOf looks the VM's domain up in libvirt.
func (r *Runtime) domainOf(c *containerRecord) (*golibvirt.Libvirt, golibvirt.Domain, error) {
	l, err := r.conn.get()
	if err != nil {
		return nil, golibvirt.Domain{}, err
	}
	dom, err := l.DomainLookupByName(c.Domain)
	if err != nil {
		return nil, golibvirt.Domain{}, fmt.Errorf("domain %s of VM container %q: %w", c.Domain, c.ID, classify(err))
	}
	return l, dom, nil
}

// domainView is what libvirt says of a domain.
type domainView struct {
	state       golibvirt.DomainState
	managedSave bool
}

func observe(l *golibvirt.Libvirt, dom golibvirt.Domain) (domainView, error) {
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return domainView{}, classify(err)
	}
	v := domainView{state: golibvirt.DomainState(state)}
	if v.state == golibvirt.DomainShutoff {
		has, err := l.DomainHasManagedSaveImage(dom, 0)
		if err != nil {
			return domainView{}, classify(err)
		}
		v.managedSave = has == 1
	}
	return v, nil
}

func domainStateName(s golibvirt.DomainState) string {
	switch s {
	case golibvirt.DomainRunning:
		return "running"
	case golibvirt.DomainBlocked:
		return "blocked"
	case golibvirt.DomainPaused:
		return "paused"
	case golibvirt.DomainShutdown:
		return "shutting-down"
	case golibvirt.DomainShutoff:
		return "shutoff"
	case golibvirt.DomainCrashed:
		return "crashed"
	case golibvirt.DomainPmsuspended:
		return "pmsuspended"
	}
	return "nostate"
}
