package cri

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// ListContainers merges the containers of every runtime (in-process
// callers; the wire is served by listContainersReply, raw_reply.go).
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	answer, err := s.listContainersReply(ctx, req)
	return asMessage(answer, err, &runtimeapi.ListContainersResponse{})
}

// listContainersReply merges the containers of every runtime. The
// primary runtime's answer is passed through undecoded (list_raw.go).
func (s *Server) listContainersReply(ctx context.Context, req *runtimeapi.ListContainersRequest) (any, error) {
	f := req.GetFilter()
	backends := s.containerBackends(f)
	if p, ok := splitRaw(backends); ok {
		data, err := rawList[*runtimeapi.Container]{
			method:     runtimeapi.RuntimeService_ListContainers_FullMethodName,
			req:        &runtimeapi.ListContainersRequest{Filter: f},
			cache:      s.containers,
			unfiltered: containerFilterEmpty(f),
			decode: func(raw []byte) ([]*runtimeapi.Container, error) {
				var old runtimeapi.ListContainersResponse
				err := proto.Unmarshal(raw, &old)
				return old.GetContainers(), err
			},
			match: func(c *runtimeapi.Container) bool { return matchContainer(f, c) },
			encode: func(items []*runtimeapi.Container) ([]byte, error) {
				return proto.Marshal(&runtimeapi.ListContainersResponse{Containers: items})
			},
			others: func(ctx context.Context, others []*registry.Runtime) ([]*runtimeapi.Container, error) {
				return s.listContainersOf(ctx, others, f)
			},
			encoded: func(ctx context.Context, el registry.EncodedLister) ([]byte, error) {
				return el.EncodedContainers(ctx, f)
			},
		}.run(ctx, s, p)
		if err != nil {
			return nil, err
		}
		return &rawReply{data: data}, nil
	}
	items, err := s.listContainersOf(ctx, backends, f)
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
	return s.listContainersOf(ctx, s.containerBackends(f), f)
}

// containerBackends are the runtimes a container list asks.
func (s *Server) containerBackends(f *runtimeapi.ContainerFilter) []*registry.Runtime {
	reg := s.reg.Load()
	switch { // one owner: ask it alone
	case f.GetId() != "":
		return []*registry.Runtime{reg.ForID(f.GetId())}
	case f.GetPodSandboxId() != "":
		return []*registry.Runtime{reg.ForID(f.GetPodSandboxId())}
	}
	return reg.Backends()
}

// listContainersOf lists the containers of backends, decoded.
func (s *Server) listContainersOf(ctx context.Context, backends []*registry.Runtime, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return listFromAll(ctx, s, backends, s.containers, containerFilterEmpty(f),
		func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.Container, error) {
			resp, err := rt.Backend.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
			return resp.GetContainers(), err
		},
		func(c *runtimeapi.Container) bool { return matchContainer(f, c) })
}
