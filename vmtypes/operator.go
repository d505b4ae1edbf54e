package vmtypes

import (
	"context"
	"time"
)

// Operator is a VM runtime's VM operations, addressed by the runtime's
// own pod sandbox or container IDs (without any registry prefix). Each
// runs under the VM pod's lock, like every CRI call on the same VM, and
// none makes kubelet recreate or lose the VM.
type Operator interface {
	ListVMs(ctx context.Context) ([]VMInfo, error)
	GetVM(ctx context.Context, id string) (VMInfo, error)
	RebootVM(ctx context.Context, id string, hard bool, timeout time.Duration) (RebootResult, error)
	SetPowerState(ctx context.Context, id string, target PowerState, grace time.Duration) (PowerChange, error)
	CreateSnapshot(ctx context.Context, id, name, description string) (SnapshotInfo, error)
	ListSnapshots(ctx context.Context, id string) ([]SnapshotInfo, error)
	RestoreSnapshot(ctx context.Context, id, name string) (PowerState, error)
	DeleteSnapshot(ctx context.Context, id, name string) error
	// Resources of another crimux identity, by kind (ForeignDomain,
	// ForeignNetns) and name.
	ListForeign(ctx context.Context) ([]ForeignResource, error)
	AdoptForeign(ctx context.Context, kind, name string) error
	DeleteForeign(ctx context.Context, kind, name string) error
}

// DefaultShutdownTimeout is how long a guest has to power off on the ACPI
// power button before it is forced off.
const DefaultShutdownTimeout = 30 * time.Second

// DefaultRebootTimeout is how long a soft reboot waits for the guest.
const DefaultRebootTimeout = 30 * time.Second
