package cri_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/registry"
)

func TestRunPodSandboxRouting(t *testing.T) {
	h := newHarness(t)
	vmAnnotation := map[string]string{registry.WorkloadTypeAnnotation: "vm"}
	tests := []struct {
		name     string
		req      *runtimeapi.RunPodSandboxRequest
		want     string // "ctrd" or "vm": the fake that must get the call
		wantCode codes.Code
		wantMsg  []string
	}{
		{name: "no handler, no annotation: primary", req: &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", nil)}, want: "ctrd"},
		{name: "handler runc", req: &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", nil), RuntimeHandler: "runc"}, want: "ctrd"},
		{name: "handler vm", req: &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", nil), RuntimeHandler: "vm"}, want: "vm"},
		{name: "annotation vm", req: &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", vmAnnotation)}, want: "vm"},
		{
			name: "annotation container",
			req:  &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", map[string]string{registry.WorkloadTypeAnnotation: "container"})},
			want: "ctrd",
		},
		{name: "handler wins over annotation", req: &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", vmAnnotation), RuntimeHandler: "runc"}, want: "ctrd"},
		{
			name:     "unknown handler",
			req:      &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", nil), RuntimeHandler: "kata"},
			wantCode: codes.InvalidArgument, wantMsg: []string{`"kata"`, "runtime_handler"},
		},
		{
			name:     "unknown workload type",
			req:      &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", map[string]string{registry.WorkloadTypeAnnotation: "gpu"})},
			wantCode: codes.InvalidArgument, wantMsg: []string{`"gpu"`, registry.WorkloadTypeAnnotation},
		},
		{name: "nil config", req: &runtimeapi.RunPodSandboxRequest{}, wantCode: codes.InvalidArgument, wantMsg: []string{"config"}},
		{
			name:     "config without metadata",
			req:      &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}},
			wantCode: codes.InvalidArgument, wantMsg: []string{"config.metadata"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			resp, err := h.rs.RunPodSandbox(ctx(t), tt.req)
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, tt.wantMsg...)
				if n := len(h.ctrd.Calls("")) + len(h.vm.Calls("")); n != 0 {
					t.Errorf("a rejected RunPodSandbox reached a runtime (%d calls)", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("RunPodSandbox: %v", err)
			}
			got := map[string]int{"ctrd": len(h.ctrd.Calls("RunPodSandbox")), "vm": len(h.vm.Calls("RunPodSandbox"))}
			if got[tt.want] != 1 || got["ctrd"]+got["vm"] != 1 {
				t.Fatalf("RunPodSandbox calls: %v, want one on %s", got, tt.want)
			}
			wantPrefix := tt.want + "-pod-" // IDs the fake mints
			if tt.want == "vm" {
				wantPrefix = "vm--" + wantPrefix
			}
			if !strings.HasPrefix(resp.PodSandboxId, wantPrefix) {
				t.Errorf("pod_sandbox_id = %q, want prefix %q", resp.PodSandboxId, wantPrefix)
			}
			// The new pod is reachable by the ID crimux returned.
			if _, err := h.rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
				t.Errorf("PodSandboxStatus(%s): %v", resp.PodSandboxId, err)
			}
		})
	}
}

// Calls after RunPodSandbox are routed by the ID's prefix and reach the
// runtime with the prefix stripped; both runtimes have a pod "p1" and a
// container "c1", so a wrong route would succeed on the wrong runtime.
func TestRoutingByID(t *testing.T) {
	h := newHarness(t)
	h.seed()
	tests := []struct {
		method string
		call   func(t *testing.T, id string) error
		field  func(proto.Message) string // the ID as the runtime saw it
		id     string                     // the runtime-local ID
	}{
		{"StartContainer", func(t *testing.T, id string) error {
			_, err := h.rs.StartContainer(ctx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.StartContainerRequest).ContainerId }, "c1"},
		{"StopContainer", func(t *testing.T, id string) error {
			_, err := h.rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.StopContainerRequest).ContainerId }, "c1"},
		{"ContainerStatus", func(t *testing.T, id string) error {
			resp, err := h.rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err == nil && resp.Status.Id != id {
				t.Errorf("ContainerStatus(%s).status.id = %s", id, resp.Status.Id)
			}
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.ContainerStatusRequest).ContainerId }, "c1"},
		{"ExecSync", func(t *testing.T, id string) error {
			_, err := h.rs.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.ExecSyncRequest).ContainerId }, "c1"},
		{"PodSandboxStatus", func(t *testing.T, id string) error {
			resp, err := h.rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err == nil && (resp.Status.Id != id || len(resp.ContainersStatuses) != 1 || !strings.HasSuffix(resp.ContainersStatuses[0].Id, "c1")) {
				t.Errorf("PodSandboxStatus(%s) = %v", id, resp)
			}
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.PodSandboxStatusRequest).PodSandboxId }, "p1"},
		{"StopPodSandbox", func(t *testing.T, id string) error {
			_, err := h.rs.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.StopPodSandboxRequest).PodSandboxId }, "p1"},
		{"CreateContainer", func(t *testing.T, id string) error {
			resp, err := h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			}})
			if err == nil && strings.HasPrefix(id, "vm--") != strings.HasPrefix(resp.ContainerId, "vm--") {
				t.Errorf("CreateContainer in %s returned container_id %s", id, resp.ContainerId)
			}
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.CreateContainerRequest).PodSandboxId }, "p1"},
		{"PortForward", func(t *testing.T, id string) error {
			_, err := h.rs.PortForward(ctx(t), &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: []int32{80}})
			return err
		}, func(m proto.Message) string { return m.(*runtimeapi.PortForwardRequest).PodSandboxId }, "p1"},
	}
	for _, tt := range tests {
		for _, target := range []struct {
			fake, other string
			prefix      string
		}{{"ctrd", "vm", ""}, {"vm", "ctrd", "vm--"}} {
			t.Run(tt.method+"/"+target.fake, func(t *testing.T) {
				fakes := map[string]*crifake.Fake{"ctrd": h.ctrd, "vm": h.vm}
				h.ctrd.ResetCalls()
				h.vm.ResetCalls()
				if err := tt.call(t, target.prefix+tt.id); err != nil {
					t.Fatalf("%s(%s%s): %v", tt.method, target.prefix, tt.id, err)
				}
				c, ok := fakes[target.fake].LastCall(tt.method)
				if !ok {
					t.Fatalf("%s did not reach %s", tt.method, target.fake)
				}
				if got := tt.field(c.Request); got != tt.id {
					t.Errorf("%s saw ID %q, want %q", target.fake, got, tt.id)
				}
				if _, ok := fakes[target.other].LastCall(tt.method); ok {
					t.Errorf("%s also reached %s", tt.method, target.other)
				}
			})
		}
	}
}

// Stop and Remove of an ID the runtime does not know succeed: kubelet
// retries them until they do.
func TestStopRemoveUnknownIDSucceeds(t *testing.T) {
	h := newHarness(t)
	calls := map[string]func(id string) error{
		"StopPodSandbox": func(id string) error {
			_, err := h.rs.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		},
		"RemovePodSandbox": func(id string) error {
			_, err := h.rs.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		},
		"StopContainer": func(id string) error {
			_, err := h.rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id})
			return err
		},
		"RemoveContainer": func(id string) error {
			_, err := h.rs.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		},
	}
	for method, call := range calls {
		for _, id := range []string{"gone", "vm--gone"} {
			t.Run(method+"/"+id, func(t *testing.T) {
				if err := call(id); err != nil {
					t.Fatalf("%s(%s) = %v, want success", method, id, err)
				}
				fake := h.ctrd
				if strings.HasPrefix(id, "vm--") {
					fake = h.vm
				}
				if _, ok := fake.LastCall(method); !ok {
					t.Errorf("%s(%s) did not reach its runtime", method, id)
				}
			})
		}
	}
	t.Run("RemoveImage", func(t *testing.T) {
		if _, err := h.is.RemoveImage(ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "gone"}}); err != nil {
			t.Errorf("RemoveImage of an unknown image = %v, want success", err)
		}
	})
	t.Run("other errors still fail", func(t *testing.T) {
		h.vm.SetError("StopContainer", status.Error(codes.DeadlineExceeded, "qemu did not stop"))
		defer h.vm.SetError("StopContainer", nil)
		_, err := h.rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: "vm--c1"})
		wantCode(t, err, codes.DeadlineExceeded, "qemu did not stop")
	})
}

// IDs no runtime can have minted are rejected before any runtime sees them.
func TestMalformedIDs(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		method, field string
		call          func(id string) error
	}{
		{"StartContainer", "container_id", func(id string) error {
			_, err := h.rs.StartContainer(ctx(t), &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}},
		{"StopContainer", "container_id", func(id string) error {
			_, err := h.rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: id})
			return err
		}},
		{"RemoveContainer", "container_id", func(id string) error {
			_, err := h.rs.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}},
		{"ContainerStatus", "container_id", func(id string) error {
			_, err := h.rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		}},
		{"StopPodSandbox", "pod_sandbox_id", func(id string) error {
			_, err := h.rs.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}},
		{"RemovePodSandbox", "pod_sandbox_id", func(id string) error {
			_, err := h.rs.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}},
		{"PodSandboxStatus", "pod_sandbox_id", func(id string) error {
			_, err := h.rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		}},
		{"CreateContainer", "pod_sandbox_id", func(id string) error {
			_, err := h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: &runtimeapi.ContainerConfig{}})
			return err
		}},
	}
	ids := map[string]string{
		"empty":      "",
		"path":       "../x",
		"vm path":    "vm--../../etc",
		"too long":   strings.Repeat("a", 300),
		"dot dot":    "..",
		"space":      "a b",
		"newline":    "a\nb",
		"non-ascii":  "caf\u00e9",
		"slash only": "/",
	}
	for _, tt := range tests {
		for name, id := range ids {
			t.Run(tt.method+"/"+name, func(t *testing.T) {
				wantCode(t, tt.call(id), codes.InvalidArgument, tt.field)
			})
		}
	}
	if n := len(h.ctrd.Calls("")) + len(h.vm.Calls("")); n != 0 {
		t.Errorf("malformed IDs reached the runtimes (%d calls)", n)
	}
	// The longest valid ID still passes.
	if err := tests[0].call(strings.Repeat("a", 253)); status.Code(err) != codes.NotFound {
		t.Errorf("StartContainer of a 253-byte ID = %v, want the runtime's NotFound", err)
	}
}

// A runtime that is down fails the calls routed to it with Unavailable
// naming it; the other runtime is unaffected.
func TestStoppedRuntimeUnavailable(t *testing.T) {
	h := newHarness(t)
	h.seed()
	h.stopVM()
	tests := []struct {
		name string
		call func() error
	}{
		{"PodSandboxStatus", func() error {
			_, err := h.rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "vm--p1"})
			return err
		}},
		{"StartContainer", func() error {
			_, err := h.rs.StartContainer(ctx(t), &runtimeapi.StartContainerRequest{ContainerId: "vm--c1"})
			return err
		}},
		{"StopPodSandbox", func() error {
			_, err := h.rs.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: "vm--p1"})
			return err
		}},
		{"RemoveContainer", func() error {
			_, err := h.rs.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: "vm--c1"})
			return err
		}},
		{"RunPodSandbox", func() error {
			_, err := h.rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: podConfig("a", nil), RuntimeHandler: "vm"})
			return err
		}},
		{"PullImage for the vm handler", func() error {
			_, err := h.is.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "disk", RuntimeHandler: "vm"}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), codes.Unavailable, `"vm"`)
		})
	}
	t.Run("primary unaffected", func(t *testing.T) {
		if _, err := h.rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "p1"}); err != nil {
			t.Errorf("PodSandboxStatus(p1) with vm down: %v", err)
		}
	})
}

// Errors a runtime returns reach the client with their code and message,
// not wrapped in a second "rpc error: code = ... desc = ...".
func TestRuntimeErrorsPassThrough(t *testing.T) {
	h := newHarness(t)
	_, err := h.rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	wantCode(t, err, codes.NotFound, `container "nope" not found`)
	if got := status.Convert(err).Message(); got != `container "nope" not found` {
		t.Errorf("message = %q, want the runtime's message unchanged", got)
	}
	h.vm.SetError("ExecSync", status.Error(codes.FailedPrecondition, "guest agent not connected"))
	_, err = h.rs.ExecSync(ctx(t), &runtimeapi.ExecSyncRequest{ContainerId: "vm--c1"})
	wantCode(t, err, codes.FailedPrecondition, "guest agent not connected")
}

func TestCreateContainer(t *testing.T) {
	h := newHarness(t)
	h.seed()
	_, err := h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: "vm--p1"})
	wantCode(t, err, codes.InvalidArgument, "config")

	h.vm.Handle("CreateContainer", func(context.Context, proto.Message) (proto.Message, error) {
		return &runtimeapi.CreateContainerResponse{}, nil
	})
	_, err = h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: "vm--p1", Config: &runtimeapi.ContainerConfig{}})
	wantCode(t, err, codes.Unavailable, `"vm"`, "empty container_id")
}

func TestObserverSeesEveryCall(t *testing.T) {
	h := newHarness(t)
	_, _ = h.rs.Version(ctx(t), &runtimeapi.VersionRequest{})
	_, _ = h.rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{})
	h.mu.Lock()
	defer h.mu.Unlock()
	want := []observation{
		{runtimeapi.RuntimeService_Version_FullMethodName, codes.OK},
		{runtimeapi.RuntimeService_StopContainer_FullMethodName, codes.InvalidArgument},
	}
	if len(h.observed) != len(want) {
		t.Fatalf("observed %v, want %v", h.observed, want)
	}
	for i := range want {
		if h.observed[i] != want[i] {
			t.Errorf("observation %d = %v, want %v", i, h.observed[i], want[i])
		}
	}
}
