package vmimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// openLayer opens layer i's uncompressed tar stream (0 is the base layer).
// Errors reading the underlying blob come back as *readError so they are
// not mistaken for a malformed image.
type openLayer func(ctx context.Context, i int) (io.ReadCloser, error)

// readError is a failure to read an image's bytes (content store, context),
// as opposed to bytes that do not parse.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// guardedReader marks the errors of r as readErrors and stops at ctx's end.
type guardedReader struct {
	ctx context.Context
	r   io.Reader
}

func (g guardedReader) Read(p []byte) (int, error) {
	if err := g.ctx.Err(); err != nil {
		return 0, &readError{err}
	}
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF {
		err = &readError{err}
	}
	return n, err
}

// asReadError returns the read failure inside err, if any.
func asReadError(err error) error {
	var re *readError
	if errors.As(err, &re) {
		return re.err
	}
	return nil
}

// Names of the files in a cache entry: fixed, so no name from the image
// ever reaches the host file system or qemu's command line.
const (
	diskFile   = "disk"
	kernelFile = "vmlinuz"
	initrdFile = "initrd.img"
)

// extracted is what extract wrote into its directory: names relative to it.
type extracted struct {
	Disk       string `json:"disk,omitempty"`
	DiskFormat string `json:"diskFormat,omitempty"`
	// DiskVirtualSize is the size of the disk the guest sees, in bytes.
	DiskVirtualSize int64  `json:"diskVirtualSize,omitempty"`
	Kernel          string `json:"kernel,omitempty"`
	Initrd          string `json:"initrd,omitempty"`
}

// extract indexes the layers, applies the layout rules, copies the chosen
// files into dir (those of the top layer as it is indexed, see
// earlyCopies; the others in a second pass over only the layers that hold
// them) and checks the disk's format.
func extract(ctx context.Context, layers int, open openLayer, dir string, opts extractOpts) (extracted, error) {
	t := newTree()
	early := newEarlyCopies(dir, opts)
	defer early.removeUnused()
	for i := range layers {
		if i == layers-1 {
			t.keep = early.keep
		}
		if err := readLayer(ctx, open, i, func(r io.Reader) error { return t.apply(r, i) }); err != nil {
			return extracted{}, err
		}
	}
	sel, err := selectFiles(t, opts.maxDisk, opts.maxBoot)
	if err != nil {
		return extracted{}, err
	}
	var out extracted
	jobs := map[int][]copyJob{}
	add := func(p *pick, name string) (string, error) {
		if p == nil {
			return "", nil
		}
		dest := filepath.Join(dir, name)
		if ok, err := early.take(p, dest); ok || err != nil {
			return name, err
		}
		jobs[p.src.layer] = append(jobs[p.src.layer], copyJob{pick: *p, dest: dest})
		return name, nil
	}
	if out.Disk, err = add(sel.disk, diskFile); err != nil {
		return extracted{}, err
	}
	if out.Kernel, err = add(sel.kernel, kernelFile); err != nil {
		return extracted{}, err
	}
	if out.Initrd, err = add(sel.initrd, initrdFile); err != nil {
		return extracted{}, err
	}
	layerIDs := make([]int, 0, len(jobs))
	for l := range jobs {
		layerIDs = append(layerIDs, l)
	}
	sort.Ints(layerIDs)
	for _, l := range layerIDs {
		if err := readLayer(ctx, open, l, func(r io.Reader) error { return copyEntries(r, l, jobs[l], !opts.noSync) }); err != nil {
			return extracted{}, err
		}
	}
	if sel.disk != nil {
		if out.DiskFormat, out.DiskVirtualSize, out.Disk, err = finishDisk(dir, sel.disk); err != nil {
			return extracted{}, err
		}
	}
	return out, nil
}

func readLayer(ctx context.Context, open openLayer, i int, fn func(io.Reader) error) error {
	rc, err := open(ctx, i)
	if err != nil {
		return err
	}
	defer rc.Close()
	err = fn(rc)
	if re := asReadError(err); re != nil {
		return re
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// finishDisk detects the copied disk's format and virtual size, checks it
// and gives the file its format's extension.
func finishDisk(dir string, disk *pick) (format string, virtualSize int64, name string, err error) {
	f, err := os.Open(filepath.Join(dir, diskFile))
	if err != nil {
		return "", 0, "", err
	}
	format, virtualSize, err = diskInfo(f, disk.size)
	f.Close()
	if err != nil {
		return "", 0, "", invalid(disk.path, "%v", err)
	}
	name = diskFile + "." + format
	return format, virtualSize, name, os.Rename(filepath.Join(dir, diskFile), filepath.Join(dir, name))
}

type copyJob struct {
	pick
	dest string
}

// copyEntries copies the entries jobs name out of one layer's tar stream,
// finding them by their ordinal as the first pass counted them.
func copyEntries(r io.Reader, layer int, jobs []copyJob, sync bool) error {
	byEntry := map[int][]copyJob{}
	for _, j := range jobs {
		byEntry[j.src.entry] = append(byEntry[j.src.entry], j)
	}
	tr := tar.NewReader(r)
	for entry := 0; len(byEntry) > 0; entry++ {
		hdr, err := tr.Next()
		if err != nil {
			if asReadError(err) != nil {
				return err
			}
			return invalid(layerName(layer), "second pass: reading tar: %v", err)
		}
		todo, ok := byEntry[entry]
		if !ok {
			continue
		}
		delete(byEntry, entry)
		if hdr.Size != todo[0].size {
			return invalid(todo[0].path, "layer %d changed between reads", layer)
		}
		if err := writeFile(todo[0].dest, tr, hdr.Size, sync); err != nil {
			var bad *badSource
			if asReadError(err) == nil && errors.As(err, &bad) {
				return invalid(todo[0].path, "reading layer %d: %v", layer, bad.err)
			}
			return err
		}
		for _, j := range todo[1:] { // one file chosen twice (links)
			if err := copyFile(j.dest, todo[0].dest, hdr.Size, sync); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(dest, src string, size int64, sync bool) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeFile(dest, f, size, sync)
}

// writeFile writes exactly size bytes of r to a new read-only file,
// leaving holes for zero blocks (raw disks are mostly zeros), and syncs it.
// The file is root's and read-only for everyone (sharedFileMode): every VM
// of the image, each with a uid of its own, reads it.
func writeFile(dest string, r io.Reader, size int64, sync bool) (err error) {
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, sharedFileMode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	n, err := copySparse(f, r)
	if err != nil {
		return err
	}
	if n != size {
		return &badSource{fmt.Errorf("%d bytes, want %d", n, size)}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	return f.Sync()
}

// badSource is a failure of the bytes being copied (a short or broken
// stream), as opposed to of the file being written.
type badSource struct{ err error }

func (e *badSource) Error() string { return e.err.Error() }
func (e *badSource) Unwrap() error { return e.err }

const sparseBlock = 64 << 10

var zeroBlock = make([]byte, sparseBlock)

func copySparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := io.ReadFull(r, buf)
		for off := 0; off < n; off += sparseBlock {
			block := buf[off:min(off+sparseBlock, n)]
			if bytes.Equal(block, zeroBlock[:len(block)]) {
				_, werr := f.Seek(int64(len(block)), io.SeekCurrent)
				if werr != nil {
					return total, werr
				}
			} else if _, werr := f.Write(block); werr != nil {
				return total, werr
			}
			total += int64(len(block))
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return total, nil
		}
		if err != nil {
			return total, &badSource{err}
		}
	}
}
