package vmimage

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"path"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// sniffEntries bounds how many tar entries of an image's top layer
// LooksLikeVM reads: a VM image's top layer starts with its disk/ or
// boot/ directory (KubeVirt's containerDisk: one layer, disk/ and its
// file), so a handful suffices, and a container image costs the
// decompression of a few entries' headers, never a whole layer.
const sniffEntries = 16

// sniffBytes bounds what LooksLikeVM decompresses: tar skips an entry's
// body by reading it, so a large first file would otherwise cost its
// whole size.
const sniffBytes = 8 << 20

// LooksLikeVM reports whether imageRef's top layer begins with what a VM
// image is made of: a regular file directly under disk/, or
// boot/vmlinuz. It reads at most sniffEntries tar headers and
// sniffBytes of the decompressed layer, so it is cheap enough to ask of
// every image pulled. A false answer is no verdict: an
// image whose VM files come from a lower layer, or later in its top
// layer, is still prepared when a VM is made of it.
func (r *Reader) LooksLikeVM(ctx context.Context, imageRef string) (bool, error) {
	ctx = namespaces.WithNamespace(ctx, r.namespace)
	img, err := r.findImage(ctx, imageRef)
	if err != nil {
		return false, err
	}
	m, err := r.platformManifest(ctx, img.Target)
	if err != nil || len(m.layers) == 0 {
		return false, err
	}
	top := m.layers[len(m.layers)-1]
	ra, err := r.blobs.ReaderAt(ctx, top)
	if err != nil {
		return false, blobError(top, err)
	}
	defer ra.Close()
	dr, err := decompress(content.NewReader(ra))
	if err != nil {
		return false, err
	}
	defer dr.Close()
	return sniffVMEntries(tar.NewReader(io.LimitReader(dr, sniffBytes)))
}

// sniffVMEntries reads up to sniffEntries headers of tr.
func sniffVMEntries(tr *tar.Reader) (bool, error) {
	for range sniffEntries {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) { // the end, or sniffBytes
			return false, nil
		}
		if err != nil {
			return false, err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if dir, _ := path.Split(name); dir == "disk/" || name == "boot/vmlinuz" {
			return true, nil
		}
	}
	return false, nil
}
