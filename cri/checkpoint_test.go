package cri_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/registry"
)

// RestorePod makes a new pod: its runtime_handler routes it like
// RunPodSandbox's.
func TestRestorePodRouting(t *testing.T) {
	h := newHarness(t)
	req := func(handler string, annotations map[string]string) *runtimeapi.RestorePodRequest {
		return &runtimeapi.RestorePodRequest{CheckpointPath: "/ckpt", Config: podConfig("a", annotations), RuntimeHandler: handler}
	}
	tests := []struct {
		name     string
		req      *runtimeapi.RestorePodRequest
		want     string
		wantCode codes.Code
	}{
		{name: "default", req: req("", nil), want: "ctrd"},
		{name: "handler vm", req: req("vm", nil), want: "vm"},
		{name: "annotation vm", req: req("", map[string]string{registry.WorkloadTypeAnnotation: "vm"}), want: "vm"},
		{name: "unknown handler", req: req("kata", nil), wantCode: codes.InvalidArgument},
		{name: "no checkpoint path", req: &runtimeapi.RestorePodRequest{Config: podConfig("a", nil)}, wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			resp, err := h.rs.RestorePod(ctx(t), tt.req)
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fake := map[string]*crifake.Fake{"ctrd": h.ctrd, "vm": h.vm}[tt.want]
			if _, ok := fake.LastCall("RestorePod"); !ok {
				t.Errorf("RestorePod did not reach %s", tt.want)
			}
			if (tt.want == "vm") != strings.HasPrefix(resp.PodSandboxId, "vm--") {
				t.Errorf("pod_sandbox_id = %q", resp.PodSandboxId)
			}
		})
	}
}
