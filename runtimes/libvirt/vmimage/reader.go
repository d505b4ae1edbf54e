// Package vmimage gets VM images out of containerd. A VM image is an
// ordinary OCI image in containerd's store with KubeVirt's containerDisk
// layout: one disk file (qcow2 or raw) under /disk/, and/or a kernel at
// /boot/vmlinuz with an optional /boot/initrd.img for direct boot, kernel
// arguments in the config label crimux.io/kernel-args.
//
// The package owns reading the layers straight from the content store,
// merging them (whiteouts, opaque directories, links resolved inside the
// image root, never outside), validating what it finds (one disk, a qcow2
// that names no backing or data file, size bounds) and a host cache with
// one checked, read-only copy of those files per manifest digest, pruned
// of what no image and no user needs any more (collect.go, holds.go).
package vmimage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/crimux/crimux/internal/durable"
	"github.com/crimux/crimux/internal/errdefs"
)

// Layout is a VM image's files, extracted to the host and checked. The
// files are read-only and shared by every VM of the image: a VM writes to
// an overlay of its own, never to Disk.Path.
type Layout struct {
	Digest     string // manifest (linux/amd64) digest the files came from
	Disk       *Disk  // nil if the image has no disk
	Kernel     string // host path, "" if none
	Initrd     string // host path, "" if none
	KernelArgs string // from the crimux.io/kernel-args label, "" if none
}

// Disk is the image's disk file. Pass Format to libvirt (and as the
// overlay's backing format): qemu must never probe it.
type Disk struct {
	Path   string
	Format string // FormatQcow2 or FormatRaw
	// VirtualSize is the size of the disk the guest sees, in bytes: a
	// qcow2's declared size (its overlay grows up to it), a raw file's own.
	VirtualSize int64
}

// Images is the part of containerd's image service the Reader uses:
// client.ImageService() has it.
type Images interface {
	Get(ctx context.Context, name string) (images.Image, error)
	List(ctx context.Context, filters ...string) ([]images.Image, error)
}

// Namespace is containerd's CRI plugin's namespace, where kubelet's pulls
// land.
const Namespace = "k8s.io"

// Reader extracts VM images from containerd's content store into a cache
// directory, once per manifest digest. One Reader owns its directory.
type Reader struct {
	images    Images
	blobs     content.Provider
	dir       string
	namespace string
	maxDisk   int64
	locks     keyedMutex
	holds     holds
	cleanOnce sync.Once
	// extracting bounds the extractions running at once: each holds an
	// image's index and a decompressor.
	extracting chan struct{}
}

// maxExtractions is how many images are extracted at once; more wait.
const maxExtractions = 2

// Option configures a Reader.
type Option func(*Reader)

// WithMaxDiskSize bounds the size of an image's disk file (default 64 GiB).
func WithMaxDiskSize(n int64) Option { return func(r *Reader) { r.maxDisk = n } }

// WithNamespace reads images from another containerd namespace than k8s.io.
func WithNamespace(ns string) Option { return func(r *Reader) { r.namespace = ns } }

// NewReader returns a Reader of the images in imgs and blobs (for a
// containerd client: client.ImageService(), client.ContentStore()) that
// caches under cacheDir, created on first use. Host paths in a Layout are
// absolute even if cacheDir is not.
func NewReader(imgs Images, blobs content.Provider, cacheDir string, opts ...Option) *Reader {
	if abs, err := filepath.Abs(cacheDir); err == nil {
		cacheDir = abs
	}
	r := &Reader{images: imgs, blobs: blobs, dir: cacheDir, namespace: Namespace, maxDisk: DefaultMaxDiskSize,
		extracting: make(chan struct{}, maxExtractions)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Prepare resolves imageRef (name:tag, name@sha256:…, or the bare sha256:…
// image ID that CRI uses) to its linux/amd64 manifest and returns that
// manifest's files on the host, extracting and checking them on first use.
// Concurrent calls for the same image extract once; a failed or
// interrupted extraction leaves nothing behind that a later call trusts.
// The entry is held, safe from Collect, until ctx's hold scope ends or,
// without one, until ctx is done (holds.go).
// A rejected image wraps errdefs.ErrInvalidArgument, a missing one
// errdefs.ErrNotFound.
func (r *Reader) Prepare(ctx context.Context, imageRef string) (Layout, error) {
	ctx = namespaces.WithNamespace(ctx, r.namespace)
	img, err := r.findImage(ctx, imageRef)
	if err != nil {
		return Layout{}, nameImage(err, imageRef)
	}
	m, err := r.platformManifest(ctx, img.Target)
	if err != nil {
		return Layout{}, nameImage(err, imageRef)
	}
	key := cacheKey(m.desc.Digest)
	if err := r.locks.lock(ctx, key); err != nil {
		return Layout{}, err
	}
	defer r.locks.unlock(key)
	r.cleanOnce.Do(r.removeStale)
	l, err := r.loadOrFill(ctx, m, key)
	if err != nil {
		return Layout{}, nameImage(err, imageRef)
	}
	// Held for the caller until it has recorded its use (holds.go).
	releaseWith(ctx, r.holds.add(key))
	return l, nil
}

// loadOrFill returns the cache entry key of m, extracting it if it is
// missing or damaged. The caller holds the key's lock.
func (r *Reader) loadOrFill(ctx context.Context, m manifestInfo, key string) (Layout, error) {
	l, err := loadEntry(filepath.Join(r.dir, key))
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		// Not ours or damaged: set it aside and extract again.
		if err := r.discard(key); err != nil {
			return Layout{}, err
		}
	}
	return r.fill(ctx, m, key)
}

// fill extracts m into a temporary directory and renames it into place.
func (r *Reader) fill(ctx context.Context, m manifestInfo, key string) (Layout, error) {
	select {
	case r.extracting <- struct{}{}:
		defer func() { <-r.extracting }()
	case <-ctx.Done():
		return Layout{}, ctx.Err()
	}
	args, err := kernelArgs(m.config)
	if err != nil {
		return Layout{}, err
	}
	// Root's: qemu opens an image's files only while libvirt lends them
	// to its user (dynamic_ownership), and lists nothing.
	if err := os.MkdirAll(r.dir, 0o711); err != nil {
		return Layout{}, err
	}
	if err := os.Chmod(r.dir, 0o711); err != nil {
		return Layout{}, err
	}
	tmp, err := os.MkdirTemp(r.dir, ".tmp-"+key+"-")
	if err != nil {
		return Layout{}, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o711); err != nil {
		return Layout{}, err
	}
	files, err := extract(ctx, len(m.layers), r.layerOpener(m.layers), tmp, extractOpts{maxDisk: r.maxDisk, maxBoot: maxBootFileSize})
	if err != nil {
		return Layout{}, err
	}
	if args != "" && files.Kernel == "" {
		return Layout{}, invalid("label "+KernelArgsLabel, "kernel arguments without a kernel at %s", kernelPath)
	}
	rec := entryRecord{Digest: m.desc.Digest.String(), Files: files, KernelArgs: args}
	if err := writeRecord(tmp, rec); err != nil {
		return Layout{}, err
	}
	final := filepath.Join(r.dir, key)
	if err := os.Rename(tmp, final); err != nil {
		// Another process won the race: its entry is as good as ours.
		if l, lerr := loadEntry(final); lerr == nil {
			return l, nil
		}
		return Layout{}, err
	}
	done = true
	if err := durable.SyncDir(r.dir); err != nil {
		return Layout{}, err
	}
	return rec.layout(final), nil
}

// blobReadSize is how much of a layer blob one content store read asks for.
const blobReadSize = 1 << 20

// layerOpener opens layers from the content store, decompressed.
func (r *Reader) layerOpener(layers []ocispec.Descriptor) openLayer {
	return func(ctx context.Context, i int) (io.ReadCloser, error) {
		desc := layers[i]
		if err := desc.Digest.Validate(); err != nil {
			return nil, invalid(layerName(i), "invalid digest: %v", err)
		}
		ra, err := r.blobs.ReaderAt(ctx, desc)
		if err != nil {
			return nil, blobError(desc, err)
		}
		// Large reads: every read of the content store's ReaderAt is a gRPC
		// call, and the decompressors read 4 KiB at a time.
		blob := bufio.NewReaderSize(content.NewReader(ra), blobReadSize)
		rc, err := decompress(guardedReader{ctx: ctx, r: blob})
		if err != nil {
			ra.Close()
			if re := asReadError(err); re != nil {
				return nil, re
			}
			return nil, invalid(fmt.Sprintf("layer %d (%s)", i, desc.Digest), "%v", err)
		}
		return closeBoth{rc, ra}, nil
	}
}

type closeBoth struct {
	io.ReadCloser
	outer io.Closer
}

func (c closeBoth) Close() error {
	err := c.ReadCloser.Close()
	if oerr := c.outer.Close(); err == nil {
		err = oerr
	}
	return err
}

// Remove drops the cache entry of a manifest digest (as in
// Layout.Digest). A digest not in the cache is not an error. The caller
// makes sure no VM still uses the entry's files.
func (r *Reader) Remove(manifestDigest string) error {
	d, err := digest.Parse(manifestDigest)
	if err != nil {
		return fmt.Errorf("image digest %q: %v: %w", manifestDigest, err, errdefs.ErrInvalidArgument)
	}
	key := cacheKey(d)
	if err := r.locks.lock(context.Background(), key); err != nil {
		return err
	}
	defer r.locks.unlock(key)
	r.cleanOnce.Do(r.removeStale)
	return r.discard(key)
}

// Cached lists the manifest digests in the cache, for garbage collection.
func (r *Reader) Cached() ([]string, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		algo, hex, ok := strings.Cut(e.Name(), "-")
		if !ok || !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if d, err := digest.Parse(algo + ":" + hex); err == nil {
			out = append(out, d.String())
		}
	}
	return out, nil
}

// discard renames an entry out of the way, so no reader ever sees it half
// removed, then deletes it.
func (r *Reader) discard(key string) error {
	gone, err := os.MkdirTemp(r.dir, ".rm-"+key+"-")
	if errors.Is(err, os.ErrNotExist) {
		return nil // no cache directory yet
	}
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(r.dir, key), filepath.Join(gone, key)); err != nil {
		os.Remove(gone)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.RemoveAll(gone)
}

// removeStale deletes what an interrupted extraction or removal left, and
// makes the entries of an older crimux (world-readable) root's.
func (r *Reader) removeStale() {
	entries, _ := os.ReadDir(r.dir)
	if len(entries) > 0 {
		_ = os.Chmod(r.dir, 0o711)
	}
	for _, e := range entries {
		p := filepath.Join(r.dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-") || strings.HasPrefix(e.Name(), ".rm-"):
			os.RemoveAll(p)
		case e.Type().IsDir():
			restrictEntry(p)
		}
	}
}

// sharedFileMode is the mode of an image's files in the cache (disk,
// kernel, initrd): VMs read them, each as a uid of its own (libvirt must
// not chown a layer many VMs share), none writes them, and the cache's
// directories (0711) let nobody but root list them: reaching one takes
// its image's digest.
const sharedFileMode = 0o444

// restrictEntry gives an entry's directory 0711, its record 0400 and its
// image's files sharedFileMode (whatever an older crimux gave them).
func restrictEntry(dir string) {
	_ = os.Chmod(dir, 0o711)
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if !f.Type().IsRegular() {
			continue
		}
		mode := os.FileMode(sharedFileMode)
		if f.Name() == recordFile {
			mode = 0o400
		}
		_ = os.Chmod(filepath.Join(dir, f.Name()), mode)
	}
}

// cacheKey names a digest's entry: "sha256-<hex>", without the colon, which
// qemu and libvirt treat specially in some paths.
func cacheKey(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded()
}

// nameImage puts the image reference into a validation error's message.
func nameImage(err error, ref string) error {
	var ie *invalidError
	if errors.As(err, &ie) && ie.Image == "" {
		ie.Image = ref
	}
	return err
}
