package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// streamPage bounds the items sent in one message of a Stream* list call.
const streamPage = 500

// ListPodSandbox merges the pods of every runtime.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := s.listSandboxes(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// StreamPodSandboxes sends the merged list in pages.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream runtimeapi.RuntimeService_StreamPodSandboxesServer) error {
	items, err := s.listSandboxes(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendPages(items, func(page []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: page})
	})
}

func (s *Server) listSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	backends := s.reg.Load().Backends()
	if f.GetId() != "" { // one owner: ask it alone
		backends = []*registry.Runtime{s.reg.Load().ForID(f.GetId())}
	}
	return listFromAll(ctx, s, backends, s.sandboxes, sandboxFilterEmpty(f),
		func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.PodSandbox, error) {
			resp, err := rt.Backend.Runtime().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
			return resp.GetItems(), err
		},
		func(sb *runtimeapi.PodSandbox) bool { return matchSandbox(f, sb) })
}

// sendPages sends items in pages of streamPage; an empty list is one empty
// page, so the client always gets a message.
func sendPages[T any](items []T, send func([]T) error) error {
	for start := 0; ; start += streamPage {
		end := min(start+streamPage, len(items))
		if err := send(items[start:end]); err != nil {
			return err
		}
		if end == len(items) {
			return nil
		}
	}
}
