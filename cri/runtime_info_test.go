package cri_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version is crimux's own and needs no runtime.
func TestVersionWithRuntimesDown(t *testing.T) {
	h := newHarness(t)
	h.ctrdSrv.Stop()
	h.stopVM()
	resp, err := h.rs.Version(ctx(t), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version != "0.1.0" || resp.RuntimeName == "" || resp.RuntimeApiVersion == "" {
		t.Errorf("Version = %v", resp)
	}
}

// kubelet reads the cgroup driver from the primary and tolerates only
// Unimplemented, which must pass through as is.
func TestRuntimeConfig(t *testing.T) {
	h := newHarness(t)
	resp, err := h.rs.RuntimeConfig(ctx(t), &runtimeapi.RuntimeConfigRequest{})
	if err != nil || resp.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("RuntimeConfig = %v, %v; want the primary's", resp, err)
	}
	if len(h.vm.Calls("RuntimeConfig")) != 0 {
		t.Errorf("RuntimeConfig asked the vm runtime")
	}
	h.ctrd.SetError("RuntimeConfig", status.Error(codes.Unimplemented, "unknown method RuntimeConfig"))
	_, err = h.rs.RuntimeConfig(ctx(t), &runtimeapi.RuntimeConfigRequest{})
	wantCode(t, err, codes.Unimplemented)
}

// UpdateRuntimeConfig reaches every runtime; only the primary's failure
// fails it.
func TestUpdateRuntimeConfig(t *testing.T) {
	h := newHarness(t)
	req := &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.0.0.0/24"}}}
	if _, err := h.rs.UpdateRuntimeConfig(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	checkAsked(t, h, "UpdateRuntimeConfig", "both")

	h.stopVM()
	if _, err := h.rs.UpdateRuntimeConfig(ctx(t), req); err != nil {
		t.Errorf("UpdateRuntimeConfig with vm down = %v, want success", err)
	}
	h.ctrd.SetError("UpdateRuntimeConfig", status.Error(codes.Internal, "bad cidr"))
	_, err := h.rs.UpdateRuntimeConfig(ctx(t), req)
	wantCode(t, err, codes.Internal, "bad cidr")
}
