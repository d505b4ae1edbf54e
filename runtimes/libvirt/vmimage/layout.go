package vmimage

import (
	"errors"
	"sort"
	"strings"
)

// The containerDisk layout (KubeVirt's), as paths in the image.
const (
	diskDir    = "/disk"
	kernelPath = "/boot/vmlinuz"
	initrdPath = "/boot/initrd.img"
)

// Default size bounds; the disk bound is configurable (WithMaxDiskSize).
const (
	DefaultMaxDiskSize = 64 << 30
	maxBootFileSize    = 512 << 20
)

// extractOpts bounds what extract takes and says whether it syncs what it
// writes (always, but for fuzzing, where fsync would make it crawl).
type extractOpts struct {
	maxDisk, maxBoot int64
	noSync           bool
}

// pick is one file the layout rules chose: its path in the image (for
// messages), its size and where its bytes are.
type pick struct {
	path string
	size int64
	src  fileRef
}

// selection is what an image holds for a VM, before anything is copied.
type selection struct {
	disk, kernel, initrd *pick
}

// selectFiles applies the layout rules to the merged filesystem: at most
// one regular file directly under /disk/ and nothing else there, an
// optional kernel and initrd (an initrd needs a kernel), and at least a
// disk or a kernel. Symlinks are followed inside the image only.
func selectFiles(t *tree, maxDisk, maxBoot int64) (selection, error) {
	var sel selection
	var err error
	if sel.disk, err = selectDisk(t, maxDisk); err != nil {
		return selection{}, err
	}
	if sel.kernel, err = selectBootFile(t, kernelPath, maxBoot); err != nil {
		return selection{}, err
	}
	if sel.initrd, err = selectBootFile(t, initrdPath, maxBoot); err != nil {
		return selection{}, err
	}
	switch {
	case sel.disk == nil && sel.kernel == nil:
		return selection{}, &invalidError{Reason: "has neither a disk under /disk/ nor a kernel at /boot/vmlinuz"}
	case sel.initrd != nil && sel.kernel == nil:
		return selection{}, invalid(initrdPath, "an initrd without a kernel at %s", kernelPath)
	}
	return sel, nil
}

func selectDisk(t *tree, maxDisk int64) (*pick, error) {
	dir, _, err := t.lookup(diskDir)
	if errors.Is(err, errNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if dir.kind != kindDir {
		return nil, invalid(diskDir+"/", "is a %s, not a directory", dir.kind)
	}
	names := make([]string, 0, len(dir.children))
	for name := range dir.children {
		names = append(names, name)
	}
	sort.Strings(names)
	var disks []*pick
	for _, name := range names {
		p, err := regularFile(t, diskDir+"/"+name)
		if err != nil {
			return nil, err
		}
		disks = append(disks, p)
	}
	switch len(disks) {
	case 0:
		return nil, nil
	case 1:
		return disks[0], checkSize(disks[0], maxDisk)
	}
	paths := make([]string, len(disks))
	for i, d := range disks {
		paths[i] = d.path
	}
	return nil, invalid(diskDir+"/", "holds %d files, want exactly one disk: %s", len(disks), strings.Join(paths, ", "))
}

func selectBootFile(t *tree, p string, maxBoot int64) (*pick, error) {
	f, err := regularFile(t, p)
	if errors.Is(err, errNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return f, checkSize(f, maxBoot)
}

// regularFile resolves p and insists on a regular file. A dangling
// symlink is an error (it says the image meant a file there); a missing p
// wraps errNotExist.
func regularFile(t *tree, p string) (*pick, error) {
	n, real, err := t.lookup(p)
	if errors.Is(err, errNotExist) {
		if lexical, _, lerr := t.walk(p, false, -1); lerr == nil && lexical.kind == kindSymlink {
			return nil, invalid(p, "symlink to %q, which is not in the image", lexical.target)
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if n.kind != kindReg {
		what := p
		if real != p {
			what += " (" + real + ")"
		}
		return nil, invalid(what, "is a %s, not a regular file", n.kind)
	}
	return &pick{path: p, size: n.size, src: n.src}, nil
}

func checkSize(p *pick, max int64) error {
	switch {
	case p.size == 0:
		return invalid(p.path, "is empty")
	case p.size > max:
		return invalid(p.path, "is %d bytes, more than the limit of %d", p.size, max)
	}
	return nil
}
