package store

import (
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/crimux/crimux/internal/errdefs"
)

// FormatVersion is the format of the records this crimux writes, kept in
// the store (bucket meta, key format). 1: no version written (crimux
// before 0.3); 2: pods carry their VM identity and their root disk's
// backing file; 3: a VM's root disk may be on a volume (Container.
// RootVolume), which a crimux of format 2 would not know to keep, check
// or release. Each version reads every older one (fields are only
// added); a store of a newer format is refused, never rewritten: its
// records may hold what this crimux would drop (a downgrade must go
// through the newer crimux's own way back).
const FormatVersion = 3

var (
	bucketMeta = []byte("meta")
	keyFormat  = []byte("format")
)

// checkFormat refuses a store whose format is newer than FormatVersion,
// or unreadable, naming the file.
func checkFormat(tx *bolt.Tx, path string) error {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return nil // version 1, or a new store
	}
	raw := b.Get(keyFormat)
	if raw == nil {
		return nil
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return fmt.Errorf("VM store %s: format %q is not a version; refusing to use it (restore it from a backup, or move it aside to start empty: running VMs are adopted again from libvirt): %w",
			path, raw, errdefs.ErrFailedPrecondition)
	}
	if v > FormatVersion {
		return fmt.Errorf("VM store %s has format %d, written by a newer crimux; this one reads format %d and older: run the newer crimux (the store is left as it is): %w",
			path, v, FormatVersion, errdefs.ErrFailedPrecondition)
	}
	return nil
}
