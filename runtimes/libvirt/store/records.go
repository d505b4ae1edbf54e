package store

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/vmtypes"
)

// The records: one per VM pod (Sandbox) and per VM (Container).

// Sandbox is a VM pod.
type Sandbox struct {
	ID        string                       `json:"id"`
	Config    *runtimeapi.PodSandboxConfig `json:"-"`
	ConfigPB  []byte                       `json:"config"`
	Handler   string                       `json:"handler"`
	CreatedAt int64                        `json:"created_at"`
	State     runtimeapi.PodSandboxState   `json:"state"`
	// ContainerID is the pod's one container (the VM), "" before it exists.
	ContainerID string `json:"container_id,omitempty"`
	// Net is the pod's network (podnet), recorded before any of it is
	// created; NetDown once its teardown (CNI DEL) is confirmed.
	Net     *podnet.Attachment `json:"net,omitempty"`
	NetDown bool               `json:"net_down,omitempty"`
	// Creating until RunPodSandbox has made everything the pod owns;
	// Removing from the start of its removal until every part is gone.
	// Either way the pod is invisible to CRI and the collector finishes
	// (tears down) what a crash or a failure left.
	Creating bool `json:"creating,omitempty"`
	Removing bool `json:"removing,omitempty"`
	// Disk is the pod's root disk (the VM's overlay over its image's
	// disk): it belongs to the pod, not to one container, so a restarted
	// container (attempt N+1) boots the same disk. nil before the first
	// container of an image with a disk. Recorded before the file exists.
	Disk *PodDisk `json:"disk,omitempty"`
	// Identity is the user and group the pod's qemu runs as, its own
	// (core.Identities); nil for a pod whose VM runs as libvirt's shared
	// qemu user (made by an older crimux, or identities off).
	Identity *VMIdentity `json:"identity,omitempty"`
	// MigratedAway: the pod's VM moved to another node, live.
	// Its disk is the VM's past: no container of the pod boots it again.
	MigratedAway bool `json:"migrated_away,omitempty"`
	// Arrived: the pod's VM arrived by live migration; its later
	// containers boot its disk, whatever crimux.io/migrate-from says.
	Arrived bool `json:"arrived,omitempty"`
	// ArrivalNote is what could not be done for the arrived VM (its
	// guest keeps its old address): a late FinishMigration says it too.
	ArrivalNote string `json:"arrival_note,omitempty"`
}

// VMIdentity is a VM pod's own uid and gid on the node.
type VMIdentity struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// PodDisk is a VM pod's root disk.
type PodDisk struct {
	// Path is the overlay file (under <state>/pods/<sandbox id>/).
	Path string `json:"path"`
	// ImageDigest is the manifest digest of the image whose disk backs
	// it (the image cache entry it needs).
	ImageDigest string `json:"image_digest"`
	// Backing and BackingFormat are the image cache's disk the overlay
	// was made over: the one backing file its header may name (checked
	// before every start). "" in a record of an older crimux.
	Backing       string `json:"backing,omitempty"`
	BackingFormat string `json:"backing_format,omitempty"`
}

// Container is a VM pod's container: the VM.
type Container struct {
	ID        string                      `json:"id"`
	SandboxID string                      `json:"sandbox_id"`
	Config    *runtimeapi.ContainerConfig `json:"-"`
	ConfigPB  []byte                      `json:"config"`
	ImageRef  string                      `json:"image_ref"`
	// ImageDigest is the manifest digest the image resolved to: the image
	// cache entry (kernel, initrd, disk) the VM uses. "" in records of an
	// older crimux.
	ImageDigest string `json:"image_digest,omitempty"`
	Domain      string `json:"domain"`
	Dir         string `json:"dir"`
	LogPath     string `json:"log_path"`
	// VCPUs and MemoryMiB are the VM's size now (after any resize).
	VCPUs     uint   `json:"vcpus"`
	MemoryMiB uint64 `json:"memory_mib"`
	// MaxVCPUs, BootMemoryMiB and MaxMemoryMiB bound an in-place resize:
	// the domain has MaxVCPUs vCPU slots and a virtio-mem device of
	// MaxMemoryMiB-BootMemoryMiB. 0 in records of an older crimux: no
	// room to grow.
	MaxVCPUs      uint   `json:"max_vcpus,omitempty"`
	BootMemoryMiB uint64 `json:"boot_memory_mib,omitempty"`
	MaxMemoryMiB  uint64 `json:"max_memory_mib,omitempty"`
	// PluggedVCPUs is how many vCPUs the running domain has plugged when a
	// shrink could not unplug them (TCG): the ones beyond VCPUs are
	// offline in the guest, and again after each of its reboots. 0: as
	// many as VCPUs.
	PluggedVCPUs uint   `json:"plugged_vcpus,omitempty"`
	Accel        string `json:"accel"`
	CreatedAt    int64  `json:"created_at"`
	StartedAt    int64  `json:"started_at,omitempty"`
	FinishedAt   int64  `json:"finished_at,omitempty"`
	ExitCode     int32  `json:"exit_code"`
	// CgroupParent is the pod's cgroup parent, kept so teardown needs no
	// sandbox record.
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// Creating is set before any of the VM's resources exist and cleared
	// when all do (intent): a record still Creating after a crash is torn
	// down by the collector.
	Creating bool `json:"creating,omitempty"`
	// Removing is set before teardown starts and the record deleted when
	// every resource is confirmed gone; until then the collector retries.
	Removing bool `json:"removing,omitempty"`
	// Adopted marks a VM found running with crimux's identity but no
	// record (a wiped state dir) and taken back into the store.
	Adopted bool                      `json:"adopted,omitempty"`
	Reason  string                    `json:"reason,omitempty"`
	Message string                    `json:"message,omitempty"`
	State   runtimeapi.ContainerState `json:"state"`
	// PowerState is the power state the user chose through the VM API
	// (runtimes/libvirt/vmops); "" is Running.
	PowerState vmtypes.PowerState `json:"power_state,omitempty"`
	// RootVolume is the volume the VM's root disk lives on;
	// nil: the pod's overlay (Sandbox.Disk).
	RootVolume *RootVolume `json:"root_volume,omitempty"`
	// Clone: the VM's first start restores template Clone.Key's saved
	// state instead of booting; nil boots it.
	Clone *Clone `json:"clone,omitempty"`
	// Migration: the VM is moving to or from another node.
	Migration *Migration `json:"migration,omitempty"`
}

// Migration is a VM's live migration as this node sees it.
type Migration struct {
	// Incoming: this container is the target; its VM arrives (no qemu
	// of its own runs until then). Otherwise the VM leaves from here.
	Incoming bool `json:"incoming,omitempty"`
	// From is what the target pod named as its source (its annotation).
	From string `json:"from,omitempty"`
	// Token names the migration's streams (migproxy); "" until prepared.
	Token string `json:"token,omitempty"`
	// SourceMAC is the guest NIC's MAC on the source: the arrived guest
	// finds its NIC by it and takes the target pod's.
	SourceMAC string `json:"source_mac,omitempty"`
	// Deadline (Unix nanoseconds) is when a target still waiting gives up.
	Deadline int64 `json:"deadline,omitempty"`
	// PreparedAt (Unix nanoseconds) is when PrepareMigration readied the
	// target: its migration is timed from then (metrics); 0 until then.
	PreparedAt int64 `json:"prepared_at,omitempty"`
}

// AwaitsMigration: c is a migration target whose VM has not arrived.
func (c *Container) AwaitsMigration() bool {
	return c.Migration != nil && c.Migration.Incoming
}

// GetKey is c's template key; "" for nil.
func (c *Clone) GetKey() string {
	if c == nil {
		return ""
	}
	return c.Key
}

// Clone is the template a VM is restored from, and the UUID its domain
// got (its XML is derived from the template's again at start).
type Clone struct {
	Key  string `json:"key"`
	UUID string `json:"uuid"`
	// MachineID is its guest's new /etc/machine-id.
	MachineID string `json:"machine_id"`
}

// RootVolume is a VM's root disk on a volume (runtimes/libvirt/rootvol).
type RootVolume struct {
	// ContainerPath names the volume (crimux.io/root-disk); HostPath is
	// the block device or the filesystem volume's directory.
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Block         bool   `json:"block,omitempty"`
	Format        string `json:"format"`
	// Key identifies the volume on the node however it is reached (the
	// device number of a block volume; the device and inode of a
	// filesystem volume's directory): two live VMs never share one.
	Key string `json:"key"`
	// Path is where qemu reaches the disk: a node or a bind mount in the
	// VM's directory.
	Path string `json:"path"`
}

// Power is the VM's power state; "" unless its container runs. Records
// from before the VM API have none: they run.
func (c *Container) Power() vmtypes.PowerState {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return ""
	}
	if c.PowerState == "" {
		return vmtypes.PowerRunning
	}
	return c.PowerState
}
