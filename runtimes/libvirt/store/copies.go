package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/crimux/crimux/internal/errdefs"
)

// Record copies: a record CRI sees (neither being created
// nor removed) also has a copy, as JSON, in the directory of what it
// describes:
//
//	<state>/pods/<sandbox id>/sandbox.json   a pod's record
//	<Container.Dir>/container.json           a VM's record, once its directory exists
//
// They are what `crimuxctl store rebuild` makes a damaged store again
// from, where libvirt's domains agree with them: only the store holds
// what kubelet asked for (the CRI configs, whose labels and annotations
// are how kubelet knows its pods again; the pod network, identity and
// disks), a domain's metadata holds IDs and names alone.
//
// A copy is written after its record is committed, and each again when
// the store is opened (records of a crimux before copies get theirs), by
// a goroutine of its own, the newest of each record's (copywriter.go): a
// new file is ~0.9 ms of ext4 journal here, more than the record's own
// commit. It is replaced whole (a rename), without an fsync of its own.
// One that cannot be written (a full disk) leaves the one before and is
// reported (OnCopyError), never failing the record's write. The
// directories are root's (0711): no VM can plant or change a copy.
const (
	SandboxCopyFile   = "sandbox.json"
	ContainerCopyFile = "container.json"
	podsDir           = "pods"
)

// copyFile is a copy on disk: the record as the store keeps it, and the
// format it is in (a rebuild refuses a copy of a newer format).
type copyFile struct {
	Format int             `json:"format"`
	Record json.RawMessage `json:"record"`
}

// SandboxCopyPath is where the copy of pod id's record is kept.
func SandboxCopyPath(stateDir, id string) string {
	return filepath.Join(stateDir, podsDir, id, SandboxCopyFile)
}

// ContainerCopyPath is where the copy of the record of the VM whose
// directory is dir is kept.
func ContainerCopyPath(dir string) string { return filepath.Join(dir, ContainerCopyFile) }

// OnCopyError is told of every record copy that could not be written.
func (s *Store) OnCopyError(f func(path string, err error)) { s.copies.setOnErr(f) }

// FlushCopies waits until the copy of every record written so far is on
// disk (or failed).
func (s *Store) FlushCopies() { s.copies.flush() }

// safeName: an ID that names one directory entry (IDs crimux mints
// always do; a record of a test may not).
func safeName(id string) bool {
	return id != "" && id != "." && id != ".." && filepath.Base(id) == id
}

// copySandbox queues the copy of pod id's record (raw, stamped stamp),
// making the pod's directory if need be; or, for a record CRI does not
// see (being created or removed) or deleted, the copy's removal (and the
// pod's directory's, if nothing else is left in it).
func (c *copyWriter) copySandbox(id string, stamp uint64, raw []byte, hidden bool) {
	if !safeName(id) {
		return
	}
	path := SandboxCopyPath(c.root, id)
	c.queue("sandbox/"+id, copyJob{stamp: stamp, path: path, raw: raw, podDir: true, remove: hidden})
}

// copyContainer queues the copy of VM id's record into its directory
// dir, written if that exists (a record written before the directory is
// made gets its copy with its next write); or, for a record CRI does not
// see, the copy's removal.
func (c *copyWriter) copyContainer(id, dir string, stamp uint64, raw []byte, hidden bool) {
	if !safeName(id) || dir == "" {
		return
	}
	c.queue("container/"+id, copyJob{stamp: stamp, path: ContainerCopyPath(dir), raw: raw, remove: hidden})
}

// forgetContainer: a deleted VM's copy went with its directory.
func (c *copyWriter) forgetContainer(id string, stamp uint64) {
	c.queue("container/"+id, copyJob{stamp: stamp, remove: true})
}

// copyAll queues a copy of every record, before any write: records of a
// crimux before copies get theirs, and a copy a crash kept from being
// written is written now.
func (s *Store) copyAll() error {
	return s.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			sb, err := decodeJSON[Sandbox](v)
			if err == nil {
				s.copies.copySandbox(string(k), s.copies.stamp.Add(1), bytes.Clone(v), sb.Creating || sb.Removing)
			}
			return nil // an unreadable record has no copy; it is reported where it is read
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketContainers).ForEach(func(k, v []byte) error {
			c, err := decodeJSON[Container](v)
			if err == nil {
				s.copies.copyContainer(string(k), c.Dir, s.copies.stamp.Add(1), bytes.Clone(v), c.Creating || c.Removing)
			}
			return nil
		})
	})
}

// do writes or removes one copy.
func (j copyJob) do() error {
	switch {
	case j.remove && j.path == "":
		return nil
	case j.remove:
		if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if j.podDir {
			_ = os.Remove(filepath.Dir(j.path)) // only if empty: the pod's disk is not the store's to remove
		}
		return nil
	case j.podDir:
		if err := makeRootDirs(filepath.Dir(j.path)); err != nil {
			return err
		}
	default:
		fi, err := os.Lstat(filepath.Dir(j.path))
		if errors.Is(err, os.ErrNotExist) {
			return nil // the VM's directory is not made yet, or gone
		} else if err != nil {
			return err
		} else if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", filepath.Dir(j.path))
		}
	}
	return writeCopy(j.path, j.raw)
}

// writeCopy replaces the file at path with a copy of the record raw.
func writeCopy(path string, raw []byte) error {
	b, err := json.Marshal(copyFile{Format: FormatVersion, Record: raw})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// makeRootDirs makes dir and its parent, root's and 0711 (whatever the
// umask), as vmfiles.MakePodDir does; those that exist are kept.
func makeRootDirs(dir string) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		err := os.Mkdir(d, 0o711)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// ReadSandboxCopy reads the copy of a pod's record.
func ReadSandboxCopy(path string) (*Sandbox, error) {
	raw, err := readCopy(path)
	if err != nil {
		return nil, err
	}
	sb, err := decodeSandbox(raw)
	if err != nil {
		return nil, fmt.Errorf("record copy %s: %w", path, err)
	}
	return sb, nil
}

// ReadContainerCopy reads the copy of a VM's record.
func ReadContainerCopy(path string) (*Container, error) {
	raw, err := readCopy(path)
	if err != nil {
		return nil, err
	}
	c, err := decodeContainer(raw)
	if err != nil {
		return nil, fmt.Errorf("record copy %s: %w", path, err)
	}
	return c, nil
}

// readCopy reads a copy's record, refusing one of a newer format: its
// record may hold what this crimux would drop.
func readCopy(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f copyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("record copy %s: %w", path, err)
	}
	switch {
	case f.Format < 1 || len(f.Record) == 0:
		return nil, fmt.Errorf("record copy %s: no format or no record in it: %w", path, errdefs.ErrFailedPrecondition)
	case f.Format > FormatVersion:
		return nil, fmt.Errorf("record copy %s has format %d, written by a newer crimux; this one reads format %d and older: %w",
			path, f.Format, FormatVersion, errdefs.ErrFailedPrecondition)
	}
	return f.Record, nil
}
