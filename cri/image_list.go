package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// ListImages merges every image store, each image ID once.
func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	images, err := s.listImages(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListImagesResponse{Images: images}, nil
}

// StreamImages sends the merged image list in pages.
func (s *Server) StreamImages(req *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	images, err := s.listImages(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendPages(images, func(page []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: page})
	})
}

func (s *Server) listImages(ctx context.Context, f *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	all, err := fanOut(ctx, s.imageBackends(), func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.Image, error) {
		resp, err := rt.Backend.Images().ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: f})
		return resp.GetImages(), err
	})
	if err != nil || len(s.imageBackends()) == 1 {
		return all, err
	}
	seen := map[string]bool{}
	out := all[:0]
	for _, img := range all {
		if !seen[img.Id] {
			seen[img.Id] = true
			out = append(out, img)
		}
	}
	return out, nil
}
