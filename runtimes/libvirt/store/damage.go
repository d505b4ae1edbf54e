package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/crimux/crimux/internal/errdefs"
)

// A damaged store: a vm.db truncated (a full disk, a copy cut
// short) or with pages overwritten. bbolt maps the file and trusts it: a
// meta page naming pages past the end of a truncated file made crimux die
// of SIGBUS in bolt.Open, with no word of which file or what to do. So
// the file's meta pages are read and checked first, bolt.Open and a walk
// of every page (tx.Check) run with faults turned into errors, and any
// damage refuses the start with an error naming the file and the way
// out. The store is never repaired or rewritten here.

// DamagedError is the refusal of a damaged store: it names the file,
// what is wrong with it and the way out. crimuxctl store rebuild tells it
// (errors.As) from a store it must not replace.
type DamagedError struct {
	Path, What string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("VM store %s is damaged (%s); crimux does not start on it and leaves it as it is. "+
		"To recover, stop crimux and run `crimuxctl store rebuild --state-dir %s`: it moves the store aside (never deletes it) "+
		"and writes a new one from what libvirt's domains and the pods' directories prove, listing what it leaves alone and why; "+
		"or restore the store from a backup: %v",
		e.Path, e.What, filepath.Dir(e.Path), errdefs.ErrFailedPrecondition)
}

// Unwrap makes the refusal a FailedPrecondition.
func (e *DamagedError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// errDamaged is the refusal of a damaged store.
func errDamaged(path, what string) error { return &DamagedError{Path: path, What: what} }

// bbolt's meta page (go.etcd.io/bbolt/internal/common): after the 16-byte
// page header, little-endian on the hosts crimux runs on.
const (
	pageHeaderSize = 16
	metaMagic      = 0xED0CDAED
	metaSize       = 64 // magic .. checksum
	metaSumOffset  = 56
)

type meta struct {
	pageSize             uint32
	root, freelist, pgid uint64
	txid                 uint64
}

// checkFile reads the two meta pages of the store at path (if it exists)
// and refuses it unless one is intact and its pages fit in the file.
func checkFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		return errDamaged(path, "the file is empty")
	}
	m0, err0 := readMeta(f, 0)
	ps := int64(os.Getpagesize())
	if err0 == nil {
		ps = int64(m0.pageSize)
	}
	m1, err1 := readMeta(f, ps)
	var best *meta
	for _, m := range []struct {
		m   meta
		err error
	}{{m0, err0}, {m1, err1}} {
		if m.err == nil && (best == nil || m.m.txid > best.txid) {
			mm := m.m
			best = &mm
		}
	}
	if best == nil {
		return errDamaged(path, fmt.Sprintf("neither meta page is intact: %v; %v", err0, err1))
	}
	need := int64(best.pgid) * int64(best.pageSize)
	if need > size {
		return errDamaged(path, fmt.Sprintf("truncated: its meta page (transaction %d) uses %d pages of %d bytes, %d bytes, and the file has %d",
			best.txid, best.pgid, best.pageSize, need, size))
	}
	if best.root >= best.pgid || best.freelist >= best.pgid && best.freelist != ^uint64(0) {
		return errDamaged(path, fmt.Sprintf("its meta page names pages (root %d, freelist %d) past its last (%d)", best.root, best.freelist, best.pgid))
	}
	return nil
}

func readMeta(f io.ReaderAt, off int64) (meta, error) {
	b := make([]byte, pageHeaderSize+metaSize)
	if _, err := f.ReadAt(b, off); err != nil {
		return meta{}, fmt.Errorf("meta page at %d: %v", off, err)
	}
	m := b[pageHeaderSize:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != metaMagic {
		return meta{}, fmt.Errorf("meta page at %d: no bbolt magic", off)
	}
	h := fnv.New64a()
	h.Write(m[:metaSumOffset])
	if h.Sum64() != le.Uint64(m[metaSumOffset:]) {
		return meta{}, fmt.Errorf("meta page at %d: checksum mismatch", off)
	}
	ps := le.Uint32(m[8:])
	if ps < 512 || ps&(ps-1) != 0 {
		return meta{}, fmt.Errorf("meta page at %d: page size %d", off, ps)
	}
	return meta{pageSize: ps, root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]), pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// guarded runs fn with memory faults (a page of the mapped file that is
// not there) turned into an error instead of killing crimux.
func guarded(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = errDamaged(path, fmt.Sprintf("reading it faulted: %v", r))
		}
	}()
	return fn()
}

// openChecked opens the store at path once its file passed checkFile,
// and walks every page (bbolt's consistency check) before crimux uses it.
func openChecked(path string, opts *bolt.Options) (*bolt.DB, error) {
	if err := checkFile(path); err != nil {
		return nil, err
	}
	var db *bolt.DB
	err := guarded(path, func() error {
		var err error
		db, err = bolt.Open(path, 0o600, opts)
		if errors.Is(err, bolt.ErrInvalid) || errors.Is(err, bolt.ErrChecksum) || errors.Is(err, bolt.ErrVersionMismatch) {
			return errDamaged(path, err.Error())
		}
		if err != nil {
			return err
		}
		return db.View(func(tx *bolt.Tx) error {
			var first error
			for err := range tx.Check() { // drained: the checker ends with the channel
				if first == nil {
					first = errDamaged(path, "its pages do not hold together: "+err.Error())
				}
			}
			return first
		})
	})
	if err != nil && db != nil {
		db.Close()
		db = nil
	}
	return db, err
}
