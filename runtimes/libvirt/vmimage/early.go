package vmimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxEarly bounds the files copied early out of one image: a disk, a
// kernel and an initrd.
const maxEarly = 3

// earlyCopies copies, while the top layer is being indexed, the files the
// layout rules will most likely pick from it (a regular file directly
// under disk/, boot/vmlinuz, boot/initrd.img, as its tar entry names
// them, within the size bounds): nothing above the top layer can hide
// them, so an image whose files all come from its top layer — every
// single-layer VM image — is read and decompressed once instead of twice.
// The picks still decide: a copy is used only if a pick names its entry;
// the others are removed, and whatever was not copied early is copied by
// extract's second pass as before.
type earlyCopies struct {
	dir              string
	maxDisk, maxBoot int64
	sync             bool
	copies           map[fileRef]string
	taken            map[fileRef]string
}

func newEarlyCopies(dir string, opts extractOpts) *earlyCopies {
	return &earlyCopies{dir: dir, maxDisk: opts.maxDisk, maxBoot: opts.maxBoot, sync: !opts.noSync,
		copies: map[fileRef]string{}, taken: map[fileRef]string{}}
}

// keep is the tree's hook for the top layer's entries: it copies hdr's
// contents from r if the entry is a likely pick.
func (e *earlyCopies) keep(hdr *tar.Header, r io.Reader, ref fileRef) error {
	if hdr.Typeflag != tar.TypeReg || len(e.copies) >= maxEarly {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return nil // applyEntry has refused it already
	}
	if max := e.bound(name); max == 0 || hdr.Size > max {
		return nil
	}
	dest := filepath.Join(e.dir, fmt.Sprintf(".early-%d-%d", ref.layer, ref.entry))
	if err := writeFile(dest, r, hdr.Size, e.sync); err != nil {
		os.Remove(dest)
		var bad *badSource
		if asReadError(err) == nil && errors.As(err, &bad) {
			return invalid("/"+name, "reading layer %d: %v", ref.layer, bad.err)
		}
		return err
	}
	e.copies[ref] = dest
	return nil
}

// bound is the size limit of a file at name if it is a likely pick, else 0.
func (e *earlyCopies) bound(name string) int64 {
	switch {
	case "/"+name == kernelPath || "/"+name == initrdPath:
		return e.maxBoot
	case path.Dir("/"+name) == diskDir && strings.TrimPrefix(name, "disk/") != "":
		return e.maxDisk
	}
	return 0
}

// take puts the early copy of p's entry at dest, if there is one: moved
// the first time, copied for a second pick of the same entry (links).
func (e *earlyCopies) take(p *pick, dest string) (bool, error) {
	if first, ok := e.taken[p.src]; ok {
		return true, copyFile(dest, first, p.size, e.sync)
	}
	src, ok := e.copies[p.src]
	if !ok {
		return false, nil
	}
	if err := os.Rename(src, dest); err != nil {
		return false, err
	}
	delete(e.copies, p.src)
	e.taken[p.src] = dest
	return true, nil
}

// removeUnused removes the early copies no pick took.
func (e *earlyCopies) removeUnused() {
	for ref, p := range e.copies {
		os.Remove(p)
		delete(e.copies, ref)
	}
}
