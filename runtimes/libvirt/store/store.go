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
)

var (
	bucketSandboxes  = []byte("sandboxes")
	bucketContainers = []byte("containers")
)

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
