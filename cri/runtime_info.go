package cri

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/registry"
)

// kubeAPIVersion is the CRI "Version" field: the kubelet-runtime API
// version, always 0.1.0.
const kubeAPIVersion = "0.1.0"

// Version names crimux; it does not depend on any runtime being up.
func (s *Server) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           kubeAPIVersion,
		RuntimeName:       version.Name,
		RuntimeVersion:    version.Version,
		RuntimeApiVersion: version.APIVersion,
	}, nil
}

// RuntimeConfig is the primary's: kubelet reads the cgroup driver from it
// (and exits on any error but Unimplemented, which the primary's own
// answer passes through).
func (s *Server) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	rt := s.reg.Load().Primary()
	resp, err := rt.Backend.Runtime().RuntimeConfig(ctx, req)
	return resp, runtimeErr(rt, err)
}

// UpdateRuntimeConfig (the pod CIDR) goes to every runtime; only the
// primary's failure fails the call, the others are logged.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	var primaryErr error
	for _, rt := range s.reg.Load().Backends() {
		_, err := rt.Backend.Runtime().UpdateRuntimeConfig(ctx, req)
		switch {
		case err == nil:
		case rt.Primary:
			primaryErr = runtimeErr(rt, err)
		default:
			s.logger(ctx).Warn("update runtime config failed", "runtime", rt.Name, "err", err)
		}
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, primaryErr
}

// errNoStatus marks a runtime that answered Status without a status.
var errNoStatus = errors.New("runtime returned no status")

// runtimeStatus asks one backend for its status.
func runtimeStatus(ctx context.Context, rt *registry.Runtime, verbose bool) (*runtimeapi.StatusResponse, error) {
	resp, err := rt.Backend.Runtime().Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
	if err == nil && resp.GetStatus() == nil {
		err = errNoStatus
	}
	return resp, err
}
