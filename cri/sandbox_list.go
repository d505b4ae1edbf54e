package cri

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// streamPage bounds the items sent in one message of a Stream* list call.
const streamPage = 500

// ListPodSandbox merges the pods of every runtime (in-process callers;
// the wire is served by listSandboxesReply, raw_reply.go).
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	answer, err := s.listSandboxesReply(ctx, req)
	return asMessage(answer, err, &runtimeapi.ListPodSandboxResponse{})
}

// listSandboxesReply merges the pods of every runtime. The primary
// runtime's answer is passed through undecoded (list_raw.go).
func (s *Server) listSandboxesReply(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (any, error) {
	f := req.GetFilter()
	backends := s.sandboxBackends(f)
	if p, ok := splitRaw(backends); ok {
		data, err := rawList[*runtimeapi.PodSandbox]{
			method:     runtimeapi.RuntimeService_ListPodSandbox_FullMethodName,
			req:        &runtimeapi.ListPodSandboxRequest{Filter: f},
			cache:      s.sandboxes,
			unfiltered: sandboxFilterEmpty(f),
			decode: func(raw []byte) ([]*runtimeapi.PodSandbox, error) {
				var old runtimeapi.ListPodSandboxResponse
				err := proto.Unmarshal(raw, &old)
				return old.GetItems(), err
			},
			match: func(sb *runtimeapi.PodSandbox) bool { return matchSandbox(f, sb) },
			encode: func(items []*runtimeapi.PodSandbox) ([]byte, error) {
				return proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: items})
			},
			others: func(ctx context.Context, others []*registry.Runtime) ([]*runtimeapi.PodSandbox, error) {
				return s.listSandboxesOf(ctx, others, f)
			},
			encoded: func(ctx context.Context, el registry.EncodedLister) ([]byte, error) {
				return el.EncodedSandboxes(ctx, f)
			},
		}.run(ctx, s, p)
		if err != nil {
			return nil, err
		}
		return &rawReply{data: data}, nil
	}
	items, err := s.listSandboxesOf(ctx, backends, f)
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
	return s.listSandboxesOf(ctx, s.sandboxBackends(f), f)
}

// sandboxBackends are the runtimes a pod list asks.
func (s *Server) sandboxBackends(f *runtimeapi.PodSandboxFilter) []*registry.Runtime {
	reg := s.reg.Load()
	if f.GetId() != "" { // one owner: ask it alone
		return []*registry.Runtime{reg.ForID(f.GetId())}
	}
	return reg.Backends()
}

// listSandboxesOf lists the pods of backends, decoded.
func (s *Server) listSandboxesOf(ctx context.Context, backends []*registry.Runtime, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
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
