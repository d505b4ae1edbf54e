package criservice

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// serviceCore is what the CRI face asks of the runtime's core, beside the
// parts it holds (Service's fields): the life cycle a CRI call drives.
type serviceCore interface {
	podCore
	vmCore
}

// podCore: a pod's records and removal.
type podCore interface {
	SandboxWithContainers(id string) (*store.Sandbox, []*store.Container, error)
	EnsureIdentity(sb *store.Sandbox) (*store.VMIdentity, error)
	AbandonSandbox(ctx context.Context, sb *store.Sandbox)
	FinishSandboxRemoval(ctx context.Context, sb *store.Sandbox) error
}

// vmCore: a VM's lock, files, start, stop, removal, status and events.
type vmCore interface {
	LockContainer(id string) (*store.Container, func(), error)
	LockVM(id string) (*store.Container, func(), error)
	VMDir(id string) string
	CgroupOf(c *store.Container) core.VMCgroup
	RequireRoom(what string) error
	StartingQemu(c *store.Container, start func() error) error
	WatchBoot(c *store.Container, since time.Time, fresh bool)
	StopVM(ctx context.Context, id string, grace time.Duration) error
	StopVMLocked(ctx context.Context, c *store.Container, grace time.Duration) error
	RemoveVM(ctx context.Context, id string) error
	StatusOf(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
	Event(c *store.Container, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse
	StartNotice(id, reason, msg string)
	Note(id, msg string)
}

// RootDisks is what the CRI face asks of the room of the VMs' root disks
// (package rootdisk) at CreateContainer: where the root disk goes (the
// pod's overlay, or a volume of its own: crimux.io/root-disk), the disk
// made or reused, and the snapshots in it given to the new VM's domain.
type RootDisks interface {
	PlanRootVolume(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig, storage vm.Storage) (*vm.RootVolume, vm.Storage, error)
	RootVolumeDisk(rv *vm.RootVolume, vmDir string) *vm.Disk
	PodDiskReusable(sb *store.Sandbox, dgst string) bool
	MakeRootVolume(ctx context.Context, sb *store.Sandbox, rec *store.Container, rv *vm.RootVolume,
		layout core.ImageLayout, undo *opguard.Rollback) (release func(), imported bool, err error)
	MakePodDisk(sb *store.Sandbox, rec *store.Container, disk string, layout core.ImageLayout,
		fromTemplate func(dst string) error, undo *opguard.Rollback) (reused bool, err error)
	CarryPodSnapshots(sb *store.Sandbox, rec *store.Container)
	GiveVolumeSnapshots(ctx context.Context, rec *store.Container, imported bool)
}
