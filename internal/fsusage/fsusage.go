// Package fsusage measures what files take on disk, as kubelet's image
// filesystem statistics count it: allocated bytes (st_blocks × 512, so a
// sparse disk image counts what it holds, not its size) and inodes, each
// inode once however many hard links it has. The VM runtime uses it for
// the image files it keeps outside containerd's store, the CRI server to
// tell whether two directories share a filesystem.
package fsusage

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Usage is what a set of files takes on disk.
type Usage struct {
	Bytes  uint64 // allocated
	Inodes uint64
}

// inode identifies a file on the host.
type inode struct{ dev, ino uint64 }

// Measure walks the trees at roots (a root that does not exist is empty)
// and returns what they take, each inode counted once across all of them.
// It follows no symlink and stays on the filesystem each root is on (a
// mount below a root is another filesystem's usage). Files that vanish
// during the walk (a VM removed meanwhile) are skipped.
func Measure(ctx context.Context, roots ...string) (Usage, error) {
	m := measurer{ctx: ctx, seen: map[inode]bool{}}
	for _, root := range roots {
		if err := m.walk(root); err != nil {
			return Usage{}, err
		}
	}
	return m.usage, nil
}

type measurer struct {
	ctx   context.Context
	seen  map[inode]bool
	usage Usage
}

func (m *measurer) walk(root string) error {
	fi, err := os.Lstat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dev := statOf(fi).Dev
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return skipVanished(err)
		}
		if err := m.ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return skipVanished(err)
		}
		st := statOf(fi)
		if st.Dev != dev { // a mount point: another filesystem's usage
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		m.count(st)
		return nil
	})
}

// count adds a file's inode unless it was seen.
func (m *measurer) count(st *syscall.Stat_t) {
	id := inode{dev: uint64(st.Dev), ino: st.Ino}
	if m.seen[id] {
		return
	}
	m.seen[id] = true
	m.usage.Inodes++
	m.usage.Bytes += uint64(st.Blocks) * 512
}

// skipVanished ignores a file removed during the walk.
func skipVanished(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// statOf is the stat of a FileInfo from os.Lstat or a DirEntry (always a
// *syscall.Stat_t on Linux).
func statOf(fi fs.FileInfo) *syscall.Stat_t {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st
	}
	return &syscall.Stat_t{}
}

// SameFilesystem reports whether paths a and b are on one filesystem (the
// same st_dev); false if either cannot be stat'ed.
func SameFilesystem(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return statOf(fa).Dev == statOf(fb).Dev
}
