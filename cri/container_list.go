package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// ListContainers merges the containers of every runtime.
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	items, err := s.listContainers(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

// StreamContainers sends the merged list in pages.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, stream runtimeapi.RuntimeService_StreamContainersServer) error {
	items, err := s.listContainers(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendPages(items, func(page []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: page})
	})
}

func (s *Server) listContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	reg := s.reg.Load()
	backends := reg.Backends()
	switch { // one owner: ask it alone
	case f.GetId() != "":
		backends = []*registry.Runtime{reg.ForID(f.GetId())}
	case f.GetPodSandboxId() != "":
		backends = []*registry.Runtime{reg.ForID(f.GetPodSandboxId())}
	}
	return listFromAll(ctx, s, backends, s.containers, containerFilterEmpty(f),
		func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.Container, error) {
			resp, err := rt.Backend.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
			return resp.GetContainers(), err
		},
		func(c *runtimeapi.Container) bool { return matchContainer(f, c) })
}
