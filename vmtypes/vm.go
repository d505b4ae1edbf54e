package vmtypes

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// VMInfo is what a VM runtime reports of one VM pod.
type VMInfo struct {
	SandboxID, ContainerID string
	Namespace, Name        string
	PodState               runtimeapi.PodSandboxState
	// ContainerState is meaningful when ContainerID is set.
	ContainerState runtimeapi.ContainerState
	// PowerState is "" unless the container runs.
	PowerState PowerState
	Domain     string
	// DomainState is libvirt's ("running", "shutoff"...), "unknown" when
	// libvirtd cannot be asked.
	DomainState string
	ManagedSave bool
	Accel       string
	VCPUs       uint
	MemoryMiB   uint64
	Image       string
	Snapshots   []SnapshotInfo
	CreatedAt   int64
	StartedAt   int64
}

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	Name, Description string
	// CreatedAt is in Unix seconds (libvirt's resolution).
	CreatedAt int64
	// VMState is the domain's state when the snapshot was taken (running,
	// paused, shutoff): the state a restore returns the VM to.
	VMState string
	Memory  bool
	Current bool
}

// RebootResult says how a VM was rebooted.
type RebootResult struct {
	// Hard: the VM was reset, not rebooted by its guest.
	Hard bool
	// SoftTimedOut: a soft reboot was asked for and the guest did not
	// restart within the deadline (or libvirt refused it), so the VM was
	// reset.
	SoftTimedOut bool
}

// Kinds of foreign resources.
const (
	ForeignDomain = "domain"
	ForeignNetns  = "netns"
)

// ForeignResource is one resource of another crimux identity.
type ForeignResource struct {
	Kind string // ForeignDomain or ForeignNetns
	// Name is the domain's name or the namespace's file name in netns_dir.
	Name string
	// Instance is the identity it carries; "" when it carries none.
	Instance string
	// State is the domain's state as libvirt reports it; "" for a netns.
	State string
	// Detail says what it belonged to, as far as crimux can tell.
	Detail string
}
