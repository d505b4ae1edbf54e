// Package cri is crimux's CRI v1 gRPC server: thin handlers, one file per
// RPC family, that route each call to the runtime that owns it (see
// registry; routing.go records the choice in the call's context for the
// metrics) and merge the answers of list calls. Logging, request IDs and
// the translation of errors to gRPC codes happen once, in interceptors.
package cri

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
)

// Server serves CRI v1 RuntimeService and ImageService. Embedding the Unsafe
// interfaces (not the Unimplemented structs) makes the compiler insist that
// every RPC is implemented here.
type Server struct {
	runtimeapi.UnsafeRuntimeServiceServer
	runtimeapi.UnsafeImageServiceServer

	reg        atomic.Pointer[registry.Registry]
	sandboxes  *listCache[*runtimeapi.PodSandbox]
	containers *listCache[*runtimeapi.Container]
	log        *slog.Logger
	// reserved: the uids and gids no pod or container may ask for
	// (reserved_ids.go).
	reserved IDRange
}

// New returns a server routing over reg.
func New(reg *registry.Registry, log *slog.Logger) *Server {
	s := &Server{
		sandboxes:  newListCache[*runtimeapi.PodSandbox](),
		containers: newListCache[*runtimeapi.Container](),
		log:        log,
	}
	s.reg.Store(reg)
	return s
}

// Register adds both CRI services to g, which must use ServerCodec: some
// answers are passed through as buffers (raw_reply.go).
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(runtimeServiceDesc(), s)
	runtimeapi.RegisterImageServiceServer(g, s)
}

// SetRegistry swaps in a new registry (config reload) and returns the old
// one, which the caller closes once in-flight calls are done.
func (s *Server) SetRegistry(reg *registry.Registry) *registry.Registry {
	return s.reg.Swap(reg)
}

// Registry returns the registry in force.
func (s *Server) Registry() *registry.Registry { return s.reg.Load() }

// runtimeErr names the runtime in errors that mean it could not be reached;
// every other downstream error passes through unchanged.
func runtimeErr(rt *registry.Runtime, err error) error {
	if err == nil {
		return nil
	}
	if errdefs.IsUnavailable(err) {
		return fmt.Errorf("runtime %q is unavailable: %w", rt.Name, err)
	}
	return err
}

// ignoreNotFound makes Stop and Remove idempotent: an unknown ID is already
// stopped and removed, whatever the runtime behind says.
func ignoreNotFound(err error) error {
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

func (s *Server) logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return s.log
}
