// Package durable writes files so that a crash (of crimux, or of the
// node) leaves either the old content or the new, never a torn file, and
// never loses a write that returned.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data: a temporary file in the same
// directory, fsynced, renamed over path, then the directory fsynced so the
// rename itself survives a crash. perm applies to a new file.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: gone already
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory: the entries created, renamed or removed in
// it are on disk once it returns.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
