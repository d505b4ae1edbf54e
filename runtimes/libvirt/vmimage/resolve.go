package vmimage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// KernelArgsLabel is the image config label with the kernel command line
// for direct kernel boot.
const KernelArgsLabel = "crimux.io/kernel-args"

// Bounds on the JSON documents of an untrusted image.
const (
	maxManifestSize   = 4 << 20 // the distribution spec's manifest limit
	maxConfigSize     = 8 << 20
	maxIndexDepth     = 4
	maxLayers         = 128
	maxKernelArgsSize = 2048 // x86's COMMAND_LINE_SIZE
)

// platform is the one VM images are picked for: qemu here runs x86_64
// guests. Strict, so a 386 disk is never chosen for want of an amd64 one.
var platform = platforms.OnlyStrict(ocispec.Platform{OS: "linux", Architecture: "amd64"})

// manifestInfo is the linux/amd64 manifest of an image, with its config.
type manifestInfo struct {
	desc   ocispec.Descriptor
	layers []ocispec.Descriptor
	config ocispec.Image
	cfgDgt digest.Digest
}

// findImage looks ref up the way containerd's CRI plugin does: a bare
// digest is an image ID (the config digest kubelet passes back after a
// pull), anything else a docker reference, normalized ("vm" is
// docker.io/library/vm:latest). Images imported outside CRI have no record
// named by their ID or by name@digest, so those fall back to a scan.
func (r *Reader) findImage(ctx context.Context, ref string) (images.Image, error) {
	if dgst, err := digest.Parse(ref); err == nil {
		img, err := r.getImage(ctx, ref)
		if !cerrdefs.IsNotFound(err) {
			return img, err
		}
		return r.scanImages(ctx, ref, dgst)
	}
	names := []string{}
	var canonical digest.Digest
	if named, err := reference.ParseDockerRef(ref); err == nil {
		names = append(names, named.String())
		if c, ok := named.(reference.Canonical); ok {
			canonical = c.Digest()
		}
	}
	if len(names) == 0 || names[0] != ref {
		names = append(names, ref) // ctr allows any name
	}
	for _, name := range names {
		img, err := r.getImage(ctx, name)
		if !cerrdefs.IsNotFound(err) {
			return img, err
		}
	}
	if canonical != "" {
		return r.scanImages(ctx, ref, canonical)
	}
	return images.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

func (r *Reader) getImage(ctx context.Context, name string) (images.Image, error) {
	img, err := r.images.Get(ctx, name)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return img, fmt.Errorf("image %q: looking it up in containerd: %w", name, err)
	}
	return img, err
}

// scanImages finds an image whose target (index or manifest) or whose
// linux/amd64 config has digest dgst.
func (r *Reader) scanImages(ctx context.Context, ref string, dgst digest.Digest) (images.Image, error) {
	all, err := r.images.List(ctx)
	if err != nil {
		return images.Image{}, fmt.Errorf("image %q: listing containerd's images: %w", ref, err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, img := range all {
		if img.Target.Digest == dgst {
			return img, nil
		}
	}
	for _, img := range all {
		if m, err := r.platformManifest(ctx, img.Target); err == nil && m.cfgDgt == dgst {
			return img, nil
		}
	}
	return images.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

// platformManifest walks from an image's target down to its linux/amd64
// manifest and reads that manifest's config.
func (r *Reader) platformManifest(ctx context.Context, desc ocispec.Descriptor) (manifestInfo, error) {
	m, err := r.platformDescriptor(ctx, desc)
	if err != nil {
		return manifestInfo{}, err
	}
	return r.readManifest(ctx, m)
}

// platformDescriptor walks from an image's target down to the descriptor
// of its linux/amd64 manifest, whose digest keys the image's cache entry;
// it reads the indexes on the way, not the manifest. Index entries without
// a platform are taken last, as containerd does.
func (r *Reader) platformDescriptor(ctx context.Context, desc ocispec.Descriptor) (ocispec.Descriptor, error) {
	for depth := 0; ; depth++ {
		if depth > maxIndexDepth {
			return ocispec.Descriptor{}, invalid(string(desc.Digest), "indexes nested more than %d deep", maxIndexDepth)
		}
		switch {
		case images.IsIndexType(desc.MediaType):
			var idx ocispec.Index
			if err := r.readJSON(ctx, desc, maxManifestSize, &idx); err != nil {
				return ocispec.Descriptor{}, err
			}
			next, ok := pickPlatform(idx.Manifests)
			if !ok {
				return ocispec.Descriptor{}, invalid("index "+string(desc.Digest), "has no linux/amd64 manifest")
			}
			desc = next
		case images.IsManifestType(desc.MediaType):
			return desc, nil
		default:
			return ocispec.Descriptor{}, invalid(string(desc.Digest), "unsupported media type %q", desc.MediaType)
		}
	}
}

func pickPlatform(descs []ocispec.Descriptor) (ocispec.Descriptor, bool) {
	var cands []ocispec.Descriptor
	for _, d := range descs {
		if !images.IsIndexType(d.MediaType) && !images.IsManifestType(d.MediaType) {
			continue
		}
		if d.Platform == nil || platform.Match(*d.Platform) {
			cands = append(cands, d)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		pi, pj := cands[i].Platform, cands[j].Platform
		switch {
		case pi == nil:
			return false
		case pj == nil:
			return true
		}
		return platform.Less(*pi, *pj)
	})
	if len(cands) == 0 {
		return ocispec.Descriptor{}, false
	}
	return cands[0], true
}

func (r *Reader) readManifest(ctx context.Context, desc ocispec.Descriptor) (manifestInfo, error) {
	var m ocispec.Manifest
	if err := r.readJSON(ctx, desc, maxManifestSize, &m); err != nil {
		return manifestInfo{}, err
	}
	if !images.IsConfigType(m.Config.MediaType) {
		return manifestInfo{}, invalid("manifest "+string(desc.Digest), "config has media type %q, not an image config", m.Config.MediaType)
	}
	if len(m.Layers) > maxLayers {
		return manifestInfo{}, invalid("manifest "+string(desc.Digest), "has %d layers, at most %d", len(m.Layers), maxLayers)
	}
	for i, l := range m.Layers {
		if !images.IsLayerType(l.MediaType) || l.MediaType == images.MediaTypeErofsLayer {
			return manifestInfo{}, invalid(layerName(i), "unsupported layer media type %q", l.MediaType)
		}
	}
	info := manifestInfo{desc: desc, layers: m.Layers, cfgDgt: m.Config.Digest}
	if err := r.readJSON(ctx, m.Config, maxConfigSize, &info.config); err != nil {
		return manifestInfo{}, err
	}
	return info, nil
}

// readJSON reads a small blob from the content store and decodes it.
func (r *Reader) readJSON(ctx context.Context, desc ocispec.Descriptor, limit int64, v any) error {
	if desc.Size > limit {
		return invalid(string(desc.Digest), "%s is %d bytes, more than %d", desc.MediaType, desc.Size, limit)
	}
	if err := desc.Digest.Validate(); err != nil {
		return invalid(string(desc.Digest), "invalid digest: %v", err)
	}
	ra, err := r.blobs.ReaderAt(ctx, desc)
	if err != nil {
		return blobError(desc, err)
	}
	defer ra.Close()
	b, err := io.ReadAll(io.LimitReader(content.NewReader(ra), limit+1))
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", desc.MediaType, desc.Digest, err)
	}
	if int64(len(b)) > limit {
		return invalid(string(desc.Digest), "%s is more than %d bytes", desc.MediaType, limit)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid(string(desc.Digest), "decoding %s: %v", desc.MediaType, err)
	}
	return nil
}

// blobError classifies a failure to open a blob: a blob the image record
// names but the content store lacks is a precondition (containerd's CRI
// discards layers after unpacking when discard_unpacked_layers is set).
func blobError(desc ocispec.Descriptor, err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("blob %s (%s) is not in containerd's content store (is discard_unpacked_layers set?): %w", desc.Digest, desc.MediaType, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("opening blob %s: %w", desc.Digest, err)
}

// kernelArgs reads the kernel command line label and sanity-checks it.
func kernelArgs(cfg ocispec.Image) (string, error) {
	args := cfg.Config.Labels[KernelArgsLabel]
	if len(args) > maxKernelArgsSize {
		return "", invalid("label "+KernelArgsLabel, "is %d bytes, at most %d", len(args), maxKernelArgsSize)
	}
	for _, c := range args {
		if c < 0x20 || c == 0x7f {
			return "", invalid("label "+KernelArgsLabel, "contains control character %#x", c)
		}
	}
	return args, nil
}
