package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/registry"
)

// ImageFsInfo merges the filesystems of every image store, then counts
// the files backends keep of images outside any store (addImageFiles).
func (s *Server) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	type fs struct{ image, container []*runtimeapi.FilesystemUsage }
	all, err := fanOut(ctx, s.imageBackends(), func(ctx context.Context, rt *registry.Runtime) ([]fs, error) {
		resp, err := rt.Backend.Images().ImageFsInfo(ctx, req)
		return []fs{{resp.GetImageFilesystems(), resp.GetContainerFilesystems()}}, err
	})
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.ImageFsInfoResponse{}
	for _, f := range all {
		out.ImageFilesystems = append(out.ImageFilesystems, f.image...)
		out.ContainerFilesystems = append(out.ContainerFilesystems, f.container...)
	}
	s.addImageFiles(ctx, out)
	return out, nil
}

// addImageFiles counts the files of images that backends keep outside any
// image store (registry.ImageFsContributor: the VM runtime's image cache
// and its VMs' disks, under its state dir), so that kubelet's image
// garbage collection and eviction see them. kubelet reads only the first
// image filesystem, where containerd reports its own; so the files are
// added to the image filesystem they share a filesystem (st_dev) with —
// the first, when crimux's state dir is on containerd's filesystem, as by
// default under /var/lib — and otherwise reported as an image filesystem
// of their own, with the state dir as its mountpoint (which kubelet then
// does not read: it sees those bytes only as that filesystem's free
// space). A backend that cannot tell is logged and left out rather than
// failing kubelet's statistics.
func (s *Server) addImageFiles(ctx context.Context, out *runtimeapi.ImageFsInfoResponse) {
	for _, rt := range s.reg.Load().Backends() {
		c, ok := registry.Ability[registry.ImageFsContributor](rt)
		if !ok {
			continue
		}
		u, err := c.ImageFsUsage(ctx)
		if err != nil {
			s.logger(ctx).Warn("image files not counted in ImageFsInfo", "runtime", rt.Name, "err", err)
			continue
		}
		out.ImageFilesystems = mergeUsage(out.ImageFilesystems, u)
	}
}

// mergeUsage adds u to the first of fss on u's filesystem, or appends it.
// A count the store left unset stays unset: a partial sum would look
// complete.
func mergeUsage(fss []*runtimeapi.FilesystemUsage, u *runtimeapi.FilesystemUsage) []*runtimeapi.FilesystemUsage {
	for _, fs := range fss {
		if !fsusage.SameFilesystem(fs.GetFsId().GetMountpoint(), u.GetFsId().GetMountpoint()) {
			continue
		}
		if fs.UsedBytes != nil {
			fs.UsedBytes = &runtimeapi.UInt64Value{Value: fs.UsedBytes.Value + u.GetUsedBytes().GetValue()}
		}
		if fs.InodesUsed != nil {
			fs.InodesUsed = &runtimeapi.UInt64Value{Value: fs.InodesUsed.Value + u.GetInodesUsed().GetValue()}
		}
		return fss
	}
	return append(fss, u)
}
