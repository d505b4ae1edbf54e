package libvirt

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
)

// The store is the truth about what kubelet asked for; libvirt is the truth
// about what runs. Records are JSON in two bbolt buckets; every change is
// one transaction, so a crash leaves either the old or the new record.
var (
	bucketSandboxes  = []byte("sandboxes")
	bucketContainers = []byte("containers")
)

// sandboxRecord is a VM pod.
type sandboxRecord struct {
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
}

// containerRecord is a VM pod's container: the VM.
type containerRecord struct {
	ID         string                      `json:"id"`
	SandboxID  string                      `json:"sandbox_id"`
	Config     *runtimeapi.ContainerConfig `json:"-"`
	ConfigPB   []byte                      `json:"config"`
	ImageRef   string                      `json:"image_ref"`
	Domain     string                      `json:"domain"`
	Dir        string                      `json:"dir"`
	LogPath    string                      `json:"log_path"`
	VCPUs      uint                        `json:"vcpus"`
	MemoryMiB  uint64                      `json:"memory_mib"`
	Accel      string                      `json:"accel"`
	CreatedAt  int64                       `json:"created_at"`
	StartedAt  int64                       `json:"started_at,omitempty"`
	FinishedAt int64                       `json:"finished_at,omitempty"`
	ExitCode   int32                       `json:"exit_code"`
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
	// (vmops_power.go); "" is Running.
	PowerState vmtypes.PowerState `json:"power_state,omitempty"`
}

type store struct{ db *bolt.DB }

func openStore(dir string) (*store, error) {
	db, err := bolt.Open(filepath.Join(dir, "vm.db"), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open VM store: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketContainers} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init VM store: %w", err)
	}
	return &store{db: db}, nil
}

func (s *store) close() error { return s.db.Close() }

func put[T any](s *store, bucket []byte, id string, rec *T) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(id), b) })
}

func get[T any](s *store, bucket []byte, id string) (*T, error) {
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

func list[T any](s *store, bucket []byte) ([]*T, error) {
	var out []*T
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, v []byte) error {
			rec := new(T)
			if err := json.Unmarshal(v, rec); err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

func del(s *store, bucket []byte, id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(id)) })
}

// The typed accessors below decode the configs kept as protobuf bytes.

func (s *store) putSandbox(r *sandboxRecord) error {
	var err error
	if r.ConfigPB, err = marshalPB(r.Config); err != nil {
		return err
	}
	return put(s, bucketSandboxes, r.ID, r)
}

func (s *store) sandbox(id string) (*sandboxRecord, error) {
	r, err := get[sandboxRecord](s, bucketSandboxes, id)
	if err != nil {
		return nil, wrapNotFound("pod sandbox", id, err)
	}
	r.Config = &runtimeapi.PodSandboxConfig{}
	return r, unmarshalPB(r.ConfigPB, r.Config)
}

func (s *store) sandboxes() ([]*sandboxRecord, error) {
	rs, err := list[sandboxRecord](s, bucketSandboxes)
	for _, r := range rs {
		r.Config = &runtimeapi.PodSandboxConfig{}
		if err := unmarshalPB(r.ConfigPB, r.Config); err != nil {
			return nil, err
		}
	}
	return rs, err
}

func (s *store) deleteSandbox(id string) error { return del(s, bucketSandboxes, id) }

func (s *store) putContainer(r *containerRecord) error {
	var err error
	if r.ConfigPB, err = marshalPB(r.Config); err != nil {
		return err
	}
	return put(s, bucketContainers, r.ID, r)
}

// container returns a live container; one being removed is gone for CRI.
func (s *store) container(id string) (*containerRecord, error) {
	r, err := get[containerRecord](s, bucketContainers, id)
	if err == nil && (r.Removing || r.Creating) {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return nil, wrapNotFound("container", id, err)
	}
	r.Config = &runtimeapi.ContainerConfig{}
	return r, unmarshalPB(r.ConfigPB, r.Config)
}

// liveContainers returns the containers CRI sees: not still being
// created, not being removed.
func (s *store) liveContainers() ([]*containerRecord, error) {
	all, err := s.containers()
	out := all[:0]
	for _, c := range all {
		if !c.Removing && !c.Creating {
			out = append(out, c)
		}
	}
	return out, err
}

// containersOf returns the live containers of one pod. A pod has one, but
// a crash between a container's record and its pod's can leave the pod
// not naming it: teardown of a pod goes by this, not by the pod's field.
func (s *store) containersOf(sandboxID string) ([]*containerRecord, error) {
	all, err := s.liveContainers()
	out := all[:0]
	for _, c := range all {
		if c.SandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out, err
}

// containers returns every record, those being removed included.
func (s *store) containers() ([]*containerRecord, error) {
	rs, err := list[containerRecord](s, bucketContainers)
	for _, r := range rs {
		r.Config = &runtimeapi.ContainerConfig{}
		if err := unmarshalPB(r.ConfigPB, r.Config); err != nil {
			return nil, err
		}
	}
	return rs, err
}

func (s *store) deleteContainer(id string) error { return del(s, bucketContainers, id) }

func wrapNotFound(kind, id string, err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%s %q: %w", kind, id, errdefs.ErrNotFound)
	}
	return err
}
