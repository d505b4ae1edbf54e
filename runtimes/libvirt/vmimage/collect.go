package vmimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
)

// InUse returns the manifest digests of the cache entries something
// outside the cache still needs (the VM runtime: those its records name).
// An error stops the collection: a caller that cannot tell says so.
type InUse func() (map[string]bool, error)

// Collect removes the cache entries nothing needs any more: the image
// whose linux/amd64 manifest keys the entry is gone from containerd (no
// image resolves to that manifest as Prepare resolves images), inUse does
// not name it, and no call of Prepare holds it (holds.go). The last two
// are checked under the entry's lock, the one Prepare takes, so an entry
// is never removed under a Prepare, nor while a call that prepared it has
// not yet recorded its use. It returns the digests removed. An image that
// cannot be resolved (its index unreadable) stops the collection before
// anything is removed: it might be any entry's.
func (r *Reader) Collect(ctx context.Context, inUse InUse) ([]string, error) {
	cached, err := r.Cached()
	if err != nil || len(cached) == 0 {
		return nil, err
	}
	present, err := r.imageManifests(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range cached {
		if present[d] {
			continue
		}
		gone, err := r.collectEntry(ctx, d, inUse)
		if err != nil {
			return removed, fmt.Errorf("image cache entry %s: %w", d, err)
		}
		if gone {
			removed = append(removed, d)
		}
	}
	return removed, nil
}

// collectEntry removes the entry of manifest digest d unless it is held
// or in use, deciding under the entry's lock.
func (r *Reader) collectEntry(ctx context.Context, d string, inUse InUse) (removed bool, err error) {
	key := cacheKey(digest.Digest(d))
	if err := r.locks.lock(ctx, key); err != nil {
		return false, err
	}
	defer r.locks.unlock(key)
	r.cleanOnce.Do(r.removeStale)
	if r.holds.held(key) {
		return false, nil
	}
	used, err := inUse()
	if err != nil || used[d] {
		return false, err
	}
	if _, err := os.Lstat(filepath.Join(r.dir, key)); errors.Is(err, os.ErrNotExist) {
		return false, nil // another collection was first
	}
	return true, r.discard(key)
}

// imageManifests returns the linux/amd64 manifest digest of every image
// in the namespace. An image without one (not a VM image for this host,
// or one Prepare would refuse) keys no entry and is skipped; one whose
// indexes cannot be read is an error.
func (r *Reader) imageManifests(ctx context.Context) (map[string]bool, error) {
	ctx = namespaces.WithNamespace(ctx, r.namespace)
	all, err := r.images.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing containerd's images: %w", err)
	}
	out := map[string]bool{}
	byTarget := map[digest.Digest]bool{} // an image has a record per name
	for _, img := range all {
		if byTarget[img.Target.Digest] {
			continue
		}
		byTarget[img.Target.Digest] = true
		m, err := r.platformDescriptor(ctx, img.Target)
		var ie *invalidError
		switch {
		case errors.As(err, &ie):
			continue
		case err != nil:
			return nil, fmt.Errorf("image %q: %w", img.Name, err)
		}
		out[m.Digest.String()] = true
	}
	return out, nil
}
