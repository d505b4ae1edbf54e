package cri

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
)

// Images live in the image store of the runtime serving the image's
// runtime_handler; with no handler (the usual case, VM disks included) in
// the primary's. Runtimes without a store of their own share the primary's.

// imageRuntime checks spec and returns the runtime whose image store holds
// its image. It records the runtime serving the image's handler as the
// call's route, also where the image lives in the primary's store, and
// before the check (routing.go).
func (s *Server) imageRuntime(ctx context.Context, spec *runtimeapi.ImageSpec) (*registry.Runtime, error) {
	reg := s.reg.Load()
	h := spec.GetRuntimeHandler()
	owner, err := reg.ForHandler(h)
	recordRoute(ctx, owner)
	if verr := validateImageSpec(spec); verr != nil {
		return nil, verr
	}
	switch {
	case err != nil:
		return nil, err
	case h == "" || owner.Backend.Images() == nil:
		return reg.Primary(), nil
	}
	return owner, nil
}

// imageBackends returns one runtime per distinct image store.
func (s *Server) imageBackends() []*registry.Runtime {
	var out []*registry.Runtime
	for _, rt := range s.reg.Load().Backends() {
		if rt.Backend.Images() != nil {
			out = append(out, rt)
		}
	}
	return out
}

func validateImageSpec(spec *runtimeapi.ImageSpec) error {
	if spec == nil || spec.Image == "" {
		return errdefs.Invalid("image.image", "must not be empty")
	}
	return nil
}

// PullImage pulls into the image's runtime store. A runtime that is down
// fails the pull with Unavailable, never an empty success.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	rt, err := s.imageRuntime(ctx, req.GetImage())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Images().PullImage(ctx, req)
	if err != nil {
		return nil, runtimeErr(rt, err)
	}
	if resp.GetImageRef() == "" {
		return nil, fmt.Errorf("runtime %q returned an empty image_ref for %q: %w", rt.Name, req.Image.Image, errdefs.ErrUnavailable)
	}
	s.prepareImage(ctx, req.Image.Image)
	return resp, nil
}

// prepareImage has every backend that makes files of images ahead of use
// (registry.ImagePreparer: the VM runtime's disk) make them now, within
// the pull. A failure is logged, not returned: the image is pulled, and
// what it is for (a VM's CreateContainer) prepares it again and reports
// why it cannot.
func (s *Server) prepareImage(ctx context.Context, image string) {
	for _, rt := range s.reg.Load().Backends() {
		p, ok := registry.Ability[registry.ImagePreparer](rt)
		if !ok {
			continue
		}
		start := time.Now()
		if err := p.PrepareImage(ctx, image); err != nil {
			s.logger(ctx).Warn("image pulled, but its files were not prepared; its first use prepares them",
				"runtime", rt.Name, "image", image, "took", time.Since(start), "err", err)
		}
	}
}

// ImageStatus asks the image's runtime store.
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	rt, err := s.imageRuntime(ctx, req.GetImage())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Images().ImageStatus(ctx, req)
	return resp, runtimeErr(rt, err)
}

// RemoveImage removes from the image's runtime store; an unknown image is
// already removed. Then the files backends made from images now gone are
// collected (collectImages).
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	rt, err := s.imageRuntime(ctx, req.GetImage())
	if err != nil {
		return nil, err
	}
	if _, err := rt.Backend.Images().RemoveImage(ctx, req); ignoreNotFound(err) != nil {
		return nil, runtimeErr(rt, err)
	}
	s.collectImages(ctx)
	return &runtimeapi.RemoveImageResponse{}, nil
}

// imageCollectTimeout bounds the collection after a RemoveImage, which
// may wait for an image being extracted: kubelet's image garbage
// collection removes images one call at a time.
const imageCollectTimeout = 30 * time.Second

// collectImages asks every backend that keeps files of images outside the
// image store (registry.ImageCollector: the VM runtime's image cache) to
// drop those of images now gone, so a removed VM image frees its disk at
// once, as a container image does. A failure is logged, not returned: the
// image is removed, and the backend's periodic collection catches up.
func (s *Server) collectImages(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, imageCollectTimeout)
	defer cancel()
	for _, rt := range s.reg.Load().Backends() {
		c, ok := registry.Ability[registry.ImageCollector](rt)
		if !ok {
			continue
		}
		if err := c.CollectImages(ctx); err != nil {
			s.logger(ctx).Warn("files of removed images not collected; the runtime's collector will retry",
				"runtime", rt.Name, "err", err)
		}
	}
}
