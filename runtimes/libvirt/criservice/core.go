package criservice

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// serviceCore is what the CRI face asks of the runtime's core, beside the
// parts it holds (Service's fields): the life cycle a CRI call drives,
// and the features that still answer here (root volumes, snapshots
// carried across a pod's VMs).
type serviceCore interface {
	podCore
	vmCore
	volumeCore
}

// podCore: a pod's records, directory and network.
type podCore interface {
	SandboxWithContainers(id string) (*store.Sandbox, []*store.Container, error)
	NewestVMOf(sbID, except string) (*store.Container, error)
	PodDir(sbID string) string
	EnsureIdentity(sb *store.Sandbox) (*store.VMIdentity, error)
	PlanNetwork(sb *store.Sandbox) error
	SetupNetwork(ctx context.Context, sb *store.Sandbox) error
	TeardownNetwork(ctx context.Context, sb *store.Sandbox) error
	RequireNetworkReady(ctx context.Context) error
	NetworkCondition(ctx context.Context) *runtimeapi.RuntimeCondition
	AbandonSandbox(ctx context.Context, sb *store.Sandbox)
	FinishSandboxRemoval(ctx context.Context, sb *store.Sandbox) error
	ForgetSnapshots(sbID string) error
}

// vmCore: a VM's lock, files, start, stop, removal, status and events.
type vmCore interface {
	LockContainer(id string) (*store.Container, func(), error)
	LockVM(id string) (*store.Container, func(), error)
	VMDir(id string) string
	DiskPathOf(c *store.Container) string
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

// volumeCore: root volumes claimed and prepared, and the snapshots a
// pod's VMs carry.
type volumeCore interface {
	ClaimRootVolume(v *vm.RootVolume, key, id string) (release func(), err error)
	PrepareRootVolume(ctx context.Context, v *vm.RootVolume, src rootvol.Source, note func(string)) (imported bool, err error)
	SaveSnapshots(l virt.Libvirt, c *store.Container) error
	CarrySnapshots(l virt.Libvirt, dom virt.Domain, sbID string) (int, error)
	RedefineVolumeSnapshots(ctx context.Context, l virt.Libvirt, dom virt.Domain, diskPath string) (int, error)
}
