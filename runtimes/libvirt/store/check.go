package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// ErrInUse: a process (crimux) has the store open.
var ErrInUse = errors.New("VM store in use")

// FileName is the store's file in the state dir.
const FileName = "vm.db"

// Check tells, without writing a byte, whether crimux would open the store
// in dir as it is: nil if it would; an error wrapping os.ErrNotExist when
// there is none; *DamagedError, *NewerFormatError; ErrInUse while another
// process holds it (bbolt's lock).
func Check(dir string) error {
	path := filepath.Join(dir, FileName)
	if _, err := os.Lstat(path); err != nil {
		return fmt.Errorf("VM store %s: %w", path, err)
	}
	if err := probeLock(path); err != nil {
		return err
	}
	db, err := openChecked(path, &bolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if errors.Is(err, bolt.ErrTimeout) {
		return fmt.Errorf("VM store %s: another process holds it: %w", path, ErrInUse)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error { return checkFormat(tx, path) })
}

// probeLock fails with ErrInUse while a process holds bbolt's lock on the
// file at path (crimux, for as long as it runs on it). A damaged store is
// never opened by bbolt, so this looks at the lock itself.
func probeLock(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("VM store %s: another process (a crimux running on it?) holds its lock: %w", path, ErrInUse)
		}
		return fmt.Errorf("VM store %s: lock: %w", path, err)
	}
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
