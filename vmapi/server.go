// Package vmapi serves crimux's VM API, crimux.vm.v1.VMService (see
// proto/vm/v1/vm.proto), on the same gRPC server and socket as CRI. The
// handlers are thin: they resolve the VM a request names (resolve.go) to
// the VM runtime that runs it and the runtime's own ID, call the runtime
// through its VM operations (vmtypes.Operator, found in the registry as
// an ability), and convert the answer (convert.go).
// Errors are errdefs sentinels, turned into gRPC codes once, by the
// interceptor the CRI server shares (cri.UnaryInterceptor).
package vmapi

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/route"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// maxTimeout bounds the deadlines a request may ask for.
const maxTimeout = 10 * time.Minute

// Server serves VMService. It finds the VM runtimes in the registry by
// their ability (registry.Ability with vmtypes.Operator), so it knows no
// runtime's concrete type.
type Server struct {
	vmv1.UnimplementedVMServiceServer

	registry func() *registry.Registry
	log      *slog.Logger
}

// New returns a server resolving VMs in the registry in force (registry is
// called per request: a config reload swaps it).
func New(registry func() *registry.Registry, log *slog.Logger) *Server {
	return &Server{registry: registry, log: log}
}

// routed returns the registry in force for one call and records the call
// as routed to the registry's VM runtime (internal/route), the label of
// every VM API call in the metrics (route.None without a VM runtime). It
// is each handler's first step, so calls refused as invalid are labelled
// too.
func (s *Server) routed(ctx context.Context) *registry.Registry {
	reg := s.registry()
	if rt, ok := reg.ForType(config.TypeVM); ok {
		route.Record(ctx, rt.Name)
	} else {
		route.Record(ctx, route.None)
	}
	return reg
}

// Register adds VMService to g.
func (s *Server) Register(g *grpc.Server) { vmv1.RegisterVMServiceServer(g, s) }

// ListVMs lists the VMs of every VM runtime.
func (s *Server) ListVMs(ctx context.Context, _ *vmv1.ListVMsRequest) (*vmv1.ListVMsResponse, error) {
	resp := &vmv1.ListVMsResponse{}
	for _, rt := range vmRuntimes(s.routed(ctx)) {
		vms, err := rt.vms.ListVMs(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range vms {
			resp.Vms = append(resp.Vms, toVM(v, rt.ids))
		}
	}
	return resp, nil
}

// GetVM reports one VM.
func (s *Server) GetVM(ctx context.Context, req *vmv1.GetVMRequest) (*vmv1.GetVMResponse, error) {
	reg := s.routed(ctx)
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	v, err := t.vms.GetVM(ctx, t.id)
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.GetVMResponse{Vm: toVM(v, t.ids)}, nil
}

// RebootVM reboots a running VM, softly first unless hard is asked for.
func (s *Server) RebootVM(ctx context.Context, req *vmv1.RebootVMRequest) (*vmv1.RebootVMResponse, error) {
	reg := s.routed(ctx)
	timeout, err := timeoutOf(req.GetTimeoutSeconds())
	if err != nil {
		return nil, err
	}
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	res, err := t.vms.RebootVM(ctx, t.id, req.GetHard(), timeout)
	if err != nil {
		return nil, t.wrap(err)
	}
	method := vmv1.RebootMethod_REBOOT_METHOD_SOFT
	if res.Hard {
		method = vmv1.RebootMethod_REBOOT_METHOD_HARD
	}
	return &vmv1.RebootVMResponse{Method: method, SoftTimedOut: res.SoftTimedOut}, nil
}

// SetPowerState moves a VM to the power state asked for.
func (s *Server) SetPowerState(ctx context.Context, req *vmv1.SetPowerStateRequest) (*vmv1.SetPowerStateResponse, error) {
	reg := s.routed(ctx)
	target, ok := powerStateFromPB(req.GetState())
	if !ok {
		return nil, errdefs.Invalid("state", "%s is not a power state to set: use RUNNING, PAUSED, SHUTDOWN or HIBERNATE", req.GetState())
	}
	grace, err := timeoutOf(req.GetTimeoutSeconds())
	if err != nil {
		return nil, err
	}
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	ch, err := t.vms.SetPowerState(ctx, t.id, target, grace)
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.SetPowerStateResponse{Previous: powerStateToPB(ch.Previous), State: powerStateToPB(ch.State), Forced: ch.Forced}, nil
}

// CreateSnapshot snapshots a VM.
func (s *Server) CreateSnapshot(ctx context.Context, req *vmv1.CreateSnapshotRequest) (*vmv1.CreateSnapshotResponse, error) {
	reg := s.routed(ctx)
	if err := vmtypes.ValidateSnapshotName(req.GetSnapshotName()); err != nil {
		return nil, err
	}
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	snap, err := t.vms.CreateSnapshot(ctx, t.id, req.GetSnapshotName(), req.GetDescription())
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.CreateSnapshotResponse{Snapshot: toSnapshot(snap)}, nil
}

// ListSnapshots lists a VM's snapshots.
func (s *Server) ListSnapshots(ctx context.Context, req *vmv1.ListSnapshotsRequest) (*vmv1.ListSnapshotsResponse, error) {
	reg := s.routed(ctx)
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	snaps, err := t.vms.ListSnapshots(ctx, t.id)
	if err != nil {
		return nil, t.wrap(err)
	}
	resp := &vmv1.ListSnapshotsResponse{}
	for _, sn := range snaps {
		resp.Snapshots = append(resp.Snapshots, toSnapshot(sn))
	}
	return resp, nil
}

// RestoreSnapshot reverts a VM to one of its snapshots.
func (s *Server) RestoreSnapshot(ctx context.Context, req *vmv1.RestoreSnapshotRequest) (*vmv1.RestoreSnapshotResponse, error) {
	reg := s.routed(ctx)
	if err := vmtypes.ValidateSnapshotName(req.GetSnapshotName()); err != nil {
		return nil, err
	}
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	state, err := t.vms.RestoreSnapshot(ctx, t.id, req.GetSnapshotName())
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.RestoreSnapshotResponse{State: powerStateToPB(state)}, nil
}

// DeleteSnapshot deletes one snapshot of a VM.
func (s *Server) DeleteSnapshot(ctx context.Context, req *vmv1.DeleteSnapshotRequest) (*vmv1.DeleteSnapshotResponse, error) {
	reg := s.routed(ctx)
	if err := vmtypes.ValidateSnapshotName(req.GetSnapshotName()); err != nil {
		return nil, err
	}
	t, err := resolve(ctx, reg, req.GetVm())
	if err != nil {
		return nil, err
	}
	if err := t.vms.DeleteSnapshot(ctx, t.id, req.GetSnapshotName()); err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.DeleteSnapshotResponse{}, nil
}

// timeoutOf turns a request's timeout_seconds into a duration; 0 leaves
// the runtime's default.
func timeoutOf(secs uint32) (time.Duration, error) {
	d := time.Duration(secs) * time.Second
	if d > maxTimeout {
		return 0, errdefs.Invalid("timeout_seconds", "%d is more than %d", secs, int(maxTimeout.Seconds()))
	}
	return d, nil
}
