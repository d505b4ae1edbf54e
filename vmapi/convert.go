package vmapi

import (
	"github.com/crimux/crimux/internal/idcodec"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// toVM converts the runtime's view of a VM, its IDs as clients see them.
func toVM(v vmtypes.VMInfo, c idcodec.Codec) *vmv1.VM {
	out := &vmv1.VM{
		PodSandboxId: c.Encode(v.SandboxID), Namespace: v.Namespace, Name: v.Name,
		PodState: v.PodState.String(), PowerState: powerStateToPB(v.PowerState),
		Domain: v.Domain, DomainState: v.DomainState, HasManagedSave: v.ManagedSave, Accelerator: v.Accel,
		Image: v.Image, CreatedAt: v.CreatedAt, StartedAt: v.StartedAt,
	}
	if v.ContainerID != "" {
		out.ContainerId = c.Encode(v.ContainerID)
		out.ContainerState = v.ContainerState.String()
		out.Resources = &vmv1.Resources{Vcpus: uint32(v.VCPUs), MemoryMib: v.MemoryMiB}
	}
	for _, s := range v.Snapshots {
		out.Snapshots = append(out.Snapshots, toSnapshot(s))
	}
	return out
}

func toSnapshot(s vmtypes.SnapshotInfo) *vmv1.Snapshot {
	return &vmv1.Snapshot{
		Name: s.Name, Description: s.Description, CreatedAt: s.CreatedAt,
		VmState: s.VMState, HasMemory: s.Memory, Current: s.Current,
	}
}

var powerStates = map[vmtypes.PowerState]vmv1.PowerState{
	vmtypes.PowerRunning:   vmv1.PowerState_POWER_STATE_RUNNING,
	vmtypes.PowerPaused:    vmv1.PowerState_POWER_STATE_PAUSED,
	vmtypes.PowerShutdown:  vmv1.PowerState_POWER_STATE_SHUTDOWN,
	vmtypes.PowerHibernate: vmv1.PowerState_POWER_STATE_HIBERNATE,
}

func powerStateToPB(p vmtypes.PowerState) vmv1.PowerState {
	return powerStates[p] // "" (not running): UNSPECIFIED
}

func powerStateFromPB(p vmv1.PowerState) (vmtypes.PowerState, bool) {
	for k, v := range powerStates {
		if v == p {
			return k, true
		}
	}
	return "", false
}
