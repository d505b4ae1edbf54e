package vmops

import (
	"context"
	"sort"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// ListVMs reports every VM pod, with what libvirt says of its domain where
// libvirtd answers.
func (r *Ops) ListVMs(ctx context.Context) ([]vmtypes.VMInfo, error) {
	sbs, err := r.Store.Sandboxes()
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
func (r *Ops) GetVM(ctx context.Context, id string) (vmtypes.VMInfo, error) {
	sbID, err := r.SandboxOf(id)
	if err != nil {
		return vmtypes.VMInfo{}, err
	}
	sb, err := r.Store.Sandbox(sbID)
	if err != nil {
		return vmtypes.VMInfo{}, err
	}
	return r.vmInfo(sb), nil
}

func (r *Ops) vmInfo(sb *store.Sandbox) vmtypes.VMInfo {
	info := vmtypes.VMInfo{
		SandboxID: sb.ID, Namespace: sb.Config.GetMetadata().GetNamespace(), Name: sb.Config.GetMetadata().GetName(),
		PodState: sb.State, CreatedAt: sb.CreatedAt, DomainState: "unknown",
	}
	if sb.ContainerID == "" {
		return info
	}
	c, err := r.Store.Container(sb.ContainerID)
	if err != nil {
		return info
	}
	info.ContainerID, info.ContainerState, info.PowerState = c.ID, c.State, c.Power()
	info.Domain, info.Accel, info.VCPUs, info.MemoryMiB = c.Domain, c.Accel, c.VCPUs, c.MemoryMiB
	info.Image, info.CreatedAt, info.StartedAt = c.Config.GetImage().GetImage(), c.CreatedAt, c.StartedAt
	l, err := r.Conn.Get()
	if err != nil {
		return info
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		if errdefs.IsNotFound(err) {
			info.DomainState = "undefined"
		}
		return info
	}
	if v, err := core.Observe(l, dom); err == nil {
		info.DomainState, info.ManagedSave = v.State.String(), v.ManagedSave
	}
	info.Snapshots, _ = listSnapshots(l, dom)
	return info
}
