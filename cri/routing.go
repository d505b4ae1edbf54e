package cri

import (
	"context"

	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/internal/route"
	"github.com/crimux/crimux/registry"
)

// Routing is decided here, once per call, and recorded in the call's
// context (internal/route) for the metrics interceptor, which labels the
// call with it. What is recorded, per kind of call:
//
//   - a call naming a pod or container: the runtime its ID names, even if
//     the ID is then refused as malformed; an empty ID: route.None;
//   - RunPodSandbox: the runtime of its handler or annotation, even if
//     its config is then refused; an unknown handler: route.None;
//   - image calls: the runtime serving the image's handler (the primary
//     without one), even where the image lives in the primary's store;
//   - everything else (lists, Status, streams, RestorePod): nothing, and
//     the metrics say "all".
//
// The records come before validation so a refused call is labelled as the
// metrics always labelled it.

// route returns the runtime owning id after checking that id is well
// formed.
func (s *Server) route(ctx context.Context, field, id string) (*registry.Runtime, error) {
	var rt *registry.Runtime
	if id != "" {
		rt = s.reg.Load().ForID(id)
	}
	recordRoute(ctx, rt)
	if err := idcodec.Validate(field, id); err != nil {
		return nil, err
	}
	return rt, nil
}

// newPodRuntime picks the runtime of a new pod (see
// registry.ForNewPod).
func (s *Server) newPodRuntime(ctx context.Context, handler string, annotations map[string]string) (*registry.Runtime, error) {
	rt, err := s.reg.Load().ForNewPod(handler, annotations)
	recordRoute(ctx, rt)
	return rt, err
}

// recordRoute records rt as the runtime of the call of ctx; nil (routing
// failed) as route.None.
func recordRoute(ctx context.Context, rt *registry.Runtime) {
	if rt == nil {
		route.Record(ctx, route.None)
		return
	}
	route.Record(ctx, rt.Name)
}
