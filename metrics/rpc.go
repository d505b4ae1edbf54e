package metrics

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/registry"
)

// RuntimeResolver names the runtime a call is routed to; req is nil for
// streaming calls.
type RuntimeResolver func(method string, req any) string

// UnaryServerInterceptor times every unary call and counts its errors. It
// must run outside the interceptor that turns errors into gRPC statuses
// (first in the chain), so it sees the codes clients see.
func (m *Metrics) UnaryServerInterceptor(resolve RuntimeResolver) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observe(info.FullMethod, resolve(info.FullMethod, req), time.Since(start), err)
		return resp, err
	}
}

// StreamServerInterceptor does the same for streaming calls (runtime
// "all": the request is not known when the stream opens).
func (m *Metrics) StreamServerInterceptor(resolve RuntimeResolver) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.observe(info.FullMethod, resolve(info.FullMethod, nil), time.Since(start), err)
		return err
	}
}

func (m *Metrics) observe(method, runtime string, d time.Duration, err error) {
	api, rpc := splitMethod(method)
	m.rpcDuration.WithLabelValues(api, rpc, runtime).Observe(d.Seconds())
	if err != nil {
		m.rpcErrors.WithLabelValues(api, rpc, runtime, status.Code(err).String()).Inc()
	}
}

// splitMethod turns "/runtime.v1.RuntimeService/RunPodSandbox" into
// ("cri", "RunPodSandbox") and "/crimux.vm.v1.VMService/GetVM" into
// ("vm", "GetVM"); other services keep their full name.
func splitMethod(method string) (api, rpc string) {
	service, rpc, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return "unknown", method
	}
	switch {
	case strings.HasPrefix(service, "runtime.v1."):
		return "cri", rpc
	case strings.HasPrefix(service, "crimux.vm."):
		return "vm", rpc
	}
	return service, rpc
}

// Runtime labels of calls that are not routed to one runtime.
const (
	RuntimeAll  = "all"
	RuntimeNone = "none"
)

// RegistryResolver routes as the CRI server does, with the registry in
// force at the time of the call: RunPodSandbox by handler and annotation,
// calls naming a container or pod by ID, image calls by their image's
// runtime handler (else the primary), VM API calls to the VM runtime.
// Everything else fans out: "all".
func RegistryResolver(current func() *registry.Registry) RuntimeResolver {
	return func(method string, req any) string {
		reg := current()
		if reg == nil {
			return RuntimeNone
		}
		if strings.HasPrefix(method, "/crimux.vm.") {
			return nameOf(reg.ForNewPod("", map[string]string{registry.WorkloadTypeAnnotation: config.TypeVM}))
		}
		switch r := req.(type) {
		case *runtimeapi.RunPodSandboxRequest:
			return nameOf(reg.ForNewPod(r.GetRuntimeHandler(), r.GetConfig().GetAnnotations()))
		case interface{ GetContainerId() string }:
			return byID(reg, r.GetContainerId())
		case interface{ GetPodSandboxId() string }:
			return byID(reg, r.GetPodSandboxId())
		case interface{ GetImage() *runtimeapi.ImageSpec }:
			return nameOf(reg.ForHandler(r.GetImage().GetRuntimeHandler()))
		}
		return RuntimeAll
	}
}

func byID(reg *registry.Registry, id string) string {
	if id == "" {
		return RuntimeNone
	}
	return reg.ForID(id).Name
}

func nameOf(rt *registry.Runtime, err error) string {
	if err != nil || rt == nil {
		return RuntimeNone
	}
	return rt.Name
}
