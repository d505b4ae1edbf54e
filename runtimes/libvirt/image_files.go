package libvirt

import (
	"context"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// The files the VM runtime makes from images live under its state dir,
// outside containerd's store: the image cache (vmimage), the VMs'
// directories, the pods' root disks and the VM templates. The CRI server has the cache
// collected after every RemoveImage (registry.ImageCollector; the
// collector does it every pass too) and counts all of them in ImageFsInfo
// (registry.ImageFsContributor), so kubelet's image garbage collection
// and eviction see what VM images take.

// PrepareImage extracts a VM image's files into the image cache right
// after its pull when its top layer shows it is one (vmimage.LooksLikeVM:
// a few tar headers, cheap for a container image), so the VM's
// CreateContainer finds its disk ready. Other images, and a VM image
// whose files lie deeper, are prepared at CreateContainer as before.
func (rt *Runtime) PrepareImage(ctx context.Context, ref string) error {
	vi, ok := rt.core.Images.(vmImages)
	if !ok {
		return nil
	}
	isVM, err := vi.r.LooksLikeVM(ctx, ref)
	if err != nil || !isVM {
		return err
	}
	_, err = vi.r.Prepare(ctx, ref)
	return err
}

// imageCacheDir is where the image cache of the runtime with state dir
// stateDir lives.
func imageCacheDir(stateDir string) string { return filepath.Join(stateDir, "images") }

// Collect prunes the image cache (vmimage.Reader.Collect), for the
// collector (gc.CollectImages).
func (v vmImages) Collect(ctx context.Context, inUse func() (map[string]bool, error)) ([]string, error) {
	return v.r.Collect(ctx, inUse)
}

// CollectImages removes the image cache entries no VM needs any more (see
// gc.CollectImages).
func (rt *Runtime) CollectImages(ctx context.Context) error {
	_, err := rt.gc.CollectImages(ctx)
	return err
}

// ImageFsUsage is what the image cache, the VMs' directories, the pods'
// root disks and the VM templates (saved memory and disk) take on disk: allocated bytes, each inode once. Its
// mountpoint is the state dir, which tells the CRI server their
// filesystem.
func (rt *Runtime) ImageFsUsage(ctx context.Context) (*runtimeapi.FilesystemUsage, error) {
	state := rt.core.Opts.StateDir
	u, err := fsusage.Measure(ctx, imageCacheDir(state), filepath.Join(state, "vms"), filepath.Join(state, vmfiles.PodsDir),
		filepath.Join(state, TemplatesDir))
	if err != nil {
		return nil, err
	}
	return &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: state},
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.Bytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.Inodes},
	}, nil
}
