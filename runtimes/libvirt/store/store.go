// Package store is the VM runtime's record of what kubelet asked for: one
// record per VM pod (Sandbox) and per VM (Container), JSON in two bbolt
// buckets under the state dir. libvirt is the truth about what runs; the
// store is the truth about what was asked. Every change is one
// transaction, so a crash leaves either the old or the new record.
//
// A record carries its intent: Creating until everything it names
// exists, Removing from the start of its teardown until every part is
// gone. Either way it is invisible to CRI (Container, LiveContainers) and
// the collector finishes what a failure or a crash left.
//
// Each record also has a copy in its pod's or VM's directory (copies.go),
// from which `crimuxctl store rebuild` (package rebuild) makes a damaged
// store again.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/vmtypes"
)

var (
	bucketSandboxes  = []byte("sandboxes")
	bucketContainers = []byte("containers")
)

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

// Store is the VM runtime's bbolt store.
type Store struct {
	db *bolt.DB
	w  *writer // every write goes through it (write.go)
	// the records lists decoded (decoded.go)
	sandboxes  decoded[Sandbox]
	containers decoded[Container]
	// copies writes each record's copy into its directory (copies.go).
	copies *copyWriter
}

// Generation changes with every write: a list made when it had a value
// is the list for as long as it keeps it. Read it before reading the
// store (see writer.update).
func (s *Store) Generation() uint64 { return s.w.gen.Load() }

// put commits rec and returns its bytes and the stamp its copy is
// written with (copies.go).
func put[T any](s *Store, bucket []byte, id string, rec *T) (raw []byte, stamp uint64, err error) {
	raw, err = json.Marshal(rec)
	if err != nil {
		return nil, 0, err
	}
	err = s.w.update(func(tx *bolt.Tx) error {
		stamp = s.copies.stamp.Add(1)
		return tx.Bucket(bucket).Put([]byte(id), raw)
	})
	return raw, stamp, err
}

func get[T any](s *Store, bucket []byte, id string) (*T, error) {
	var rec *T
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get([]byte(id))
		if b == nil {
			return errdefs.ErrNotFound
		}
		rec = new(T)
		return json.Unmarshal(b, rec)
	})
	return rec, err
}

// list decodes every record of bucket, those decoded before from the
// same bytes taken from cache (decoded.go), and hands out copies.
func list[T any](s *Store, bucket []byte, cache *decoded[T], decode func([]byte) (*T, error), copyOf func(*T) *T) ([]*T, error) {
	var out []*T
	seen := map[string]decodedEntry[T]{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			id := string(k)
			e, ok := cache.lookup(id, v)
			if !ok {
				rec, err := decode(v)
				if err != nil {
					return err
				}
				// v is bbolt's, valid only in this transaction.
				e = decodedEntry[T]{raw: bytes.Clone(v), rec: rec}
			}
			seen[id] = e
			out = append(out, copyOf(e.rec))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	cache.replace(seen)
	return out, nil
}

func decodeJSON[T any](raw []byte) (*T, error) {
	rec := new(T)
	return rec, json.Unmarshal(raw, rec)
}

// del deletes a record and returns the stamp of its copy's removal.
func del(s *Store, bucket []byte, id string) (stamp uint64, err error) {
	err = s.w.update(func(tx *bolt.Tx) error {
		stamp = s.copies.stamp.Add(1)
		return tx.Bucket(bucket).Delete([]byte(id))
	})
	return stamp, err
}

// The typed accessors below decode the configs kept as protobuf bytes.

// PutSandbox saves a pod record.
func (s *Store) PutSandbox(r *Sandbox) error {
	var err error
	if r.ConfigPB, err = marshalPB(r.Config); err != nil {
		return err
	}
	raw, stamp, err := put(s, bucketSandboxes, r.ID, r)
	if err == nil {
		s.copies.copySandbox(r.ID, stamp, raw, r.Creating || r.Removing)
	}
	return err
}

// Sandbox returns a pod record, whatever its intent.
func (s *Store) Sandbox(id string) (*Sandbox, error) {
	r, err := get[Sandbox](s, bucketSandboxes, id)
	if err != nil {
		return nil, wrapNotFound("pod sandbox", id, err)
	}
	r.Config = &runtimeapi.PodSandboxConfig{}
	return r, unmarshalPB(r.ConfigPB, r.Config)
}

// LiveSandbox returns a pod CRI sees: one being created or removed is
// NotFound.
func (s *Store) LiveSandbox(id string) (*Sandbox, error) {
	sb, err := s.Sandbox(id)
	if err == nil && (sb.Creating || sb.Removing) {
		return nil, wrapNotFound("pod sandbox", id, errdefs.ErrNotFound)
	}
	return sb, err
}

// LiveSandboxes returns the pods CRI sees.
func (s *Store) LiveSandboxes() ([]*Sandbox, error) {
	all, err := s.Sandboxes()
	out := all[:0]
	for _, sb := range all {
		if !sb.Creating && !sb.Removing {
			out = append(out, sb)
		}
	}
	return out, err
}

// Sandboxes returns every pod record, those being created or removed included.
func (s *Store) Sandboxes() ([]*Sandbox, error) {
	return list(s, bucketSandboxes, &s.sandboxes, decodeSandbox, copySandbox)
}

// DeleteSandbox deletes a pod record, and its copy.
func (s *Store) DeleteSandbox(id string) error {
	stamp, err := del(s, bucketSandboxes, id)
	if err == nil {
		s.copies.copySandbox(id, stamp, nil, true)
	}
	return err
}

// PutContainer saves a VM record.
func (s *Store) PutContainer(r *Container) error {
	var err error
	if r.ConfigPB, err = marshalPB(r.Config); err != nil {
		return err
	}
	raw, stamp, err := put(s, bucketContainers, r.ID, r)
	if err == nil {
		s.copies.copyContainer(r.ID, r.Dir, stamp, raw, r.Creating || r.Removing)
	}
	return err
}

// Container returns a live container; one being removed is gone for CRI.
func (s *Store) Container(id string) (*Container, error) {
	r, err := get[Container](s, bucketContainers, id)
	if err == nil && (r.Removing || r.Creating) {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return nil, wrapNotFound("container", id, err)
	}
	r.Config = &runtimeapi.ContainerConfig{}
	return r, unmarshalPB(r.ConfigPB, r.Config)
}

// LiveContainers returns the containers CRI sees: not still being
// created, not being removed.
func (s *Store) LiveContainers() ([]*Container, error) {
	all, err := s.Containers()
	out := all[:0]
	for _, c := range all {
		if !c.Removing && !c.Creating {
			out = append(out, c)
		}
	}
	return out, err
}

// ContainersOf returns the live containers of one pod. A pod has one, but
// a crash between a container's record and its pod's can leave the pod
// not naming it: teardown of a pod goes by this, not by the pod's field.
func (s *Store) ContainersOf(sandboxID string) ([]*Container, error) {
	all, err := s.LiveContainers()
	out := all[:0]
	for _, c := range all {
		if c.SandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out, err
}

// Containers returns every record, those being removed included.
func (s *Store) Containers() ([]*Container, error) {
	return list(s, bucketContainers, &s.containers, decodeContainer, copyContainer)
}

// DeleteContainer deletes a VM record. Its copy goes with the VM's
// directory, which is removed first.
func (s *Store) DeleteContainer(id string) error {
	stamp, err := del(s, bucketContainers, id)
	if err == nil {
		s.copies.forgetContainer(id, stamp)
	}
	return err
}

func wrapNotFound(kind, id string, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%s %q: %w", kind, id, errdefs.ErrNotFound)
	}
	return err
}

// AnyContainer returns a VM record whatever its intent (Creating and
// Removing included): the collector's view, for which a record being
// removed still owns its domain and directory.
func (s *Store) AnyContainer(id string) (*Container, error) {
	r, err := get[Container](s, bucketContainers, id)
	if err != nil {
		return nil, wrapNotFound("container", id, err)
	}
	r.Config = &runtimeapi.ContainerConfig{}
	return r, unmarshalPB(r.ConfigPB, r.Config)
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

func marshalPB(m proto.Message) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	return proto.Marshal(m)
}

func unmarshalPB(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// PutRawContainer writes a VM record's bytes as they are, unchecked: for
// tests that need a record this version cannot read (damage, a
// downgrade), which everything else must treat as unknown, not absent.
func (s *Store) PutRawContainer(id string, b []byte) error {
	return s.w.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketContainers).Put([]byte(id), b) })
}
