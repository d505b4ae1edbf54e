package vmimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Bounds on untrusted tar streams, so a hostile image costs bounded memory
// whatever it holds: the index keeps every name (and link target) of every
// layer until the image is merged. A containerDisk holds a handful of
// files; a whole root filesystem (which crimux never boots from) holds
// tens of thousands.
const (
	maxEntries   = 1 << 16  // tar headers over all layers
	maxPathLen   = 4096     // PATH_MAX, for names and link targets
	maxNameBytes = 16 << 20 // names and link targets over all layers
)

// OCI whiteouts (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	whiteoutMeta   = ".wh..wh." // aufs metadata, never a file of the image
)

// apply merges one layer's uncompressed tar stream into t as layer number
// layer (0 is the base). Whiteouts and opaque directories hide what lower
// layers wrote; a non-directory replaces whatever was at its path; parent
// directories are resolved through symlinks inside the image, as
// containerd's applier does, and an entry that would land outside the root
// is an error.
func (t *tree) apply(r io.Reader, layer int) error {
	tr := tar.NewReader(r)
	for entry := 0; ; entry++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if asReadError(err) != nil {
				return err
			}
			return invalid(layerName(layer), "reading tar: %v", err)
		}
		t.entries++
		if t.entries > maxEntries {
			return invalid(layerName(layer), "more than %d tar entries in the image", maxEntries)
		}
		if t.nameBytes += len(hdr.Name) + len(hdr.Linkname); t.nameBytes > maxNameBytes {
			return invalid(layerName(layer), "more than %d bytes of file names in the image", maxNameBytes)
		}
		ref := fileRef{layer: layer, entry: entry}
		if err := t.applyEntry(hdr, ref); err != nil {
			return err
		}
		if t.keep != nil {
			if err := t.keep(hdr, tr, ref); err != nil {
				return err
			}
		}
	}
}

func layerName(layer int) string { return fmt.Sprintf("layer %d", layer) }

// cleanName turns a tar entry name into a path relative to the image root
// ("" for the root itself). A name with ".." components is rejected rather
// than clamped: no legitimate layer has one.
func cleanName(name string) (string, error) {
	if len(name) > maxPathLen {
		return "", fmt.Errorf("name longer than %d bytes", maxPathLen)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains a NUL byte")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("name climbs above the image root")
		}
	}
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	return p, nil
}

func (t *tree) applyEntry(hdr *tar.Header, ref fileRef) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return invalid(layerName(ref.layer), "entry %q: %v", hdr.Name, err)
	}
	if name == "" {
		return nil // the root is always a directory
	}
	dir, base := path.Split(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return t.whiteout(dir, base, ref.layer)
	}
	parent, real, err := t.walk(dir, true, ref.layer)
	if err != nil {
		return withLayer(err, ref.layer, hdr.Name)
	}
	if parent.kind != kindDir {
		return invalid(layerName(ref.layer), "entry %q: parent %s is a %s", hdr.Name, real, parent.kind)
	}
	n, err := t.entryNode(hdr, ref)
	if err != nil {
		return err
	}
	if old := parent.children[base]; old != nil && old.kind == kindDir && n.kind == kindDir {
		old.layer = ref.layer // directories merge
		return nil
	}
	parent.children[base] = n
	return nil
}

func (t *tree) entryNode(hdr *tar.Header, ref fileRef) (*node, error) {
	switch hdr.Typeflag {
	case tar.TypeDir:
		return newDir(ref.layer), nil
	case tar.TypeReg, tar.TypeGNUSparse:
		if hdr.Size < 0 {
			return nil, invalid(layerName(ref.layer), "entry %q has a negative size", hdr.Name)
		}
		return &node{kind: kindReg, layer: ref.layer, size: hdr.Size, src: ref}, nil
	case tar.TypeSymlink:
		if len(hdr.Linkname) > maxPathLen || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return nil, invalid(layerName(ref.layer), "symlink %q has an invalid target", hdr.Name)
		}
		return &node{kind: kindSymlink, layer: ref.layer, target: hdr.Linkname}, nil
	case tar.TypeLink:
		return t.hardLink(hdr, ref.layer)
	default:
		return &node{kind: kindOther, layer: ref.layer}, nil
	}
}

// hardLink copies the node the link names: a tar hard link names a path
// in the image (this layer's earlier entries or a lower layer's), and its
// bytes are that file's bytes.
func (t *tree) hardLink(hdr *tar.Header, layer int) (*node, error) {
	target, err := cleanName(hdr.Linkname)
	if err != nil || target == "" {
		return nil, invalid(layerName(layer), "hard link %q -> %q: invalid target", hdr.Name, hdr.Linkname)
	}
	dir, base := path.Split(target)
	parent, _, err := t.walk(dir, true, -1)
	var tn *node
	if err == nil {
		tn = parent.children[base]
	} else if !errors.Is(err, errNotExist) {
		return nil, withLayer(err, layer, hdr.Name)
	}
	if tn == nil {
		return nil, invalid(layerName(layer), "hard link %q -> %q: target not in the image", hdr.Name, hdr.Linkname)
	}
	if tn.kind == kindDir {
		return nil, invalid(layerName(layer), "hard link %q -> %q: target is a directory", hdr.Name, hdr.Linkname)
	}
	n := *tn
	n.layer = layer
	return &n, nil
}

// whiteout applies ".wh.<name>" or the opaque marker found in dir.
func (t *tree) whiteout(dir, base string, layer int) error {
	parent, _, err := t.walk(dir, true, -1)
	if errors.Is(err, errNotExist) {
		return nil // nothing below to hide
	}
	if err != nil {
		return withLayer(err, layer, dir+base)
	}
	if parent.kind != kindDir {
		return nil
	}
	switch {
	case base == whiteoutOpaque:
		t.pruneLower(parent, layer)
	case strings.HasPrefix(base, whiteoutMeta):
	default:
		victim := strings.TrimPrefix(base, whiteoutPrefix)
		if c := parent.children[victim]; c != nil && t.pruneLower(c, layer) {
			delete(parent.children, victim)
		}
	}
	if t.steps > t.budget {
		return t.tooMuchWork(layerName(layer))
	}
	return nil
}

// withLayer prefixes a path error met while applying a layer's entry.
func withLayer(err error, layer int, name string) error {
	var ie *invalidError
	if errors.As(err, &ie) {
		return invalid(layerName(layer), "entry %q: %s: %s", name, ie.Path, ie.Reason)
	}
	return invalid(layerName(layer), "entry %q: %v", name, err)
}
