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

// NewerFormatError is the refusal of a store of a newer format: it is
// left as it is, by crimux and by crimuxctl store rebuild alike.
type NewerFormatError struct {
	Path   string
	Format int
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("VM store %s has format %d, written by a newer crimux; this one reads format %d and older: run the newer crimux (the store is left as it is): %v",
		e.Path, e.Format, FormatVersion, errdefs.ErrFailedPrecondition)
}

// Unwrap makes the refusal a FailedPrecondition.
func (e *NewerFormatError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// checkFormat refuses a store whose format is newer than FormatVersion,
// or unreadable (damaged), naming the file.
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
		return errDamaged(path, fmt.Sprintf("its format %q is not a version", raw))
	}
	if v > FormatVersion {
		return &NewerFormatError{Path: path, Format: v}
	}
	return nil
}
