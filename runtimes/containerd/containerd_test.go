package containerd_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/runtimes/containerd"
)

// callTimeout is the base deadline of the backends under test: long enough
// that no call here runs into it, short enough to tell the factors apart.
const callTimeout = 10 * time.Second

// serve starts a fake runtime and a backend dialed to it.
func serve(t *testing.T, codec *idcodec.Codec) (*crifake.Fake, *crifake.Server, *containerd.Backend) {
	t.Helper()
	f := crifake.New("ctrd")
	srv := crifake.Serve(t, f, crifake.SocketPath(t, "containerd.sock"))
	b, err := containerd.Dial(srv.Endpoint(), containerd.Options{CallTimeout: callTimeout, Codec: codec})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return f, srv, b
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCallReachesRuntime(t *testing.T) {
	f, _, b := serve(t, nil)
	f.AddSandboxes(&runtimeapi.PodSandbox{Id: "p1"})
	resp, err := b.Runtime().ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	if len(resp.Items) != 1 || resp.Items[0].Id != "p1" {
		t.Errorf("items = %v, want p1 unchanged (no codec)", resp.Items)
	}
	if _, err := b.Images().PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if len(f.Calls("ListPodSandbox")) != 1 || len(f.Calls("PullImage")) != 1 {
		t.Errorf("fake saw %d ListPodSandbox and %d PullImage calls, want 1 each", len(f.Calls("ListPodSandbox")), len(f.Calls("PullImage")))
	}
}

func TestDownstreamErrorsPassThrough(t *testing.T) {
	f, _, b := serve(t, nil)
	f.SetError("StartContainer", status.Error(codes.FailedPrecondition, "container c1 is not created"))
	_, err := b.Runtime().StartContainer(ctx(t), &runtimeapi.StartContainerRequest{ContainerId: "c1"})
	if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != "container c1 is not created" {
		t.Errorf("StartContainer error = %v, want the runtime's FailedPrecondition unchanged", err)
	}
	_, err = b.Runtime().ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStatus of an unknown ID = %v, want NotFound", err)
	}
}

func TestDeadlines(t *testing.T) {
	f, _, b := serve(t, nil)
	rs, is := b.Runtime(), b.Images()
	tests := []struct {
		method string
		call   func(context.Context) error
		want   time.Duration // 0: no deadline
	}{
		{"Version", func(c context.Context) error { _, err := rs.Version(c, &runtimeapi.VersionRequest{}); return err }, callTimeout},
		{"ListContainers", func(c context.Context) error {
			_, err := rs.ListContainers(c, &runtimeapi.ListContainersRequest{})
			return err
		}, callTimeout},
		{"RunPodSandbox", func(c context.Context) error {
			_, err := rs.RunPodSandbox(c, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
			return err
		}, 4 * callTimeout},
		{"StopContainer", func(c context.Context) error {
			_, err := rs.StopContainer(c, &runtimeapi.StopContainerRequest{ContainerId: "c1", Timeout: 30})
			return err
		}, callTimeout + 30*time.Second},
		{"ExecSync", func(c context.Context) error {
			_, err := rs.ExecSync(c, &runtimeapi.ExecSyncRequest{ContainerId: "c1", Timeout: 5})
			return err
		}, callTimeout + 5*time.Second},
		{"PullImage", func(c context.Context) error {
			_, err := is.PullImage(c, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
			return err
		}, 0},
		{"CheckpointContainer", func(c context.Context) error {
			_, err := rs.CheckpointContainer(c, &runtimeapi.CheckpointContainerRequest{ContainerId: "c1"})
			return err
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			f.ResetCalls()
			_ = tt.call(context.Background()) // NotFound for unknown IDs is fine: only the deadline counts
			c, ok := f.LastCall(tt.method)
			if !ok {
				t.Fatalf("the fake saw no %s", tt.method)
			}
			got, has := c.Timeout()
			switch {
			case tt.want == 0 && has:
				t.Errorf("%s had a deadline %v away, want none", tt.method, got)
			case tt.want != 0 && !has:
				t.Errorf("%s had no deadline, want %v", tt.method, tt.want)
			case tt.want != 0 && (got > tt.want || got < tt.want-2*time.Second):
				t.Errorf("%s deadline %v away, want about %v", tt.method, got, tt.want)
			}
		})
	}
}

// A caller's earlier deadline wins over the backend's own.
func TestCallerDeadlineWins(t *testing.T) {
	f, _, b := serve(t, nil)
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := b.Runtime().RunPodSandbox(c, &runtimeapi.RunPodSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	call, _ := f.LastCall("RunPodSandbox")
	if got, ok := call.Timeout(); !ok || got > time.Second {
		t.Errorf("deadline %v away (set: %v), want at most the caller's 1s", got, ok)
	}
}

// A caller's later deadline gives way to the backend's own.
func TestBackendDeadlineWinsOverALaterOne(t *testing.T) {
	f, _, b := serve(t, nil)
	c, cancel := context.WithTimeout(context.Background(), 10*callTimeout)
	defer cancel()
	if _, err := b.Runtime().Version(c, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	call, _ := f.LastCall("Version")
	if got, ok := call.Timeout(); !ok || got > callTimeout || got < callTimeout-2*time.Second {
		t.Errorf("deadline %v away (set: %v), want about the backend's %v", got, ok, callTimeout)
	}
}

// containerd restarting: calls fail Unavailable while it is gone and work
// again, on the same Backend, soon after it is back.
func TestReconnect(t *testing.T) {
	_, srv, b := serve(t, nil)
	version := func() error {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := b.Runtime().Version(c, &runtimeapi.VersionRequest{})
		return err
	}
	if err := version(); err != nil {
		t.Fatalf("Version before restart: %v", err)
	}
	srv.Stop()
	if err := version(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Version with the runtime down = %v, want Unavailable", err)
	}

	restarted := crifake.New("ctrd")
	crifake.Serve(t, restarted, srv.Path)
	start := time.Now()
	var err error
	for time.Since(start) < 8*time.Second {
		if err = version(); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Version still fails %v after the runtime came back: %v", time.Since(start), err)
	}
	t.Logf("reconnected %v after the runtime came back", time.Since(start).Round(time.Millisecond))
	if _, ok := restarted.LastCall("Version"); !ok {
		t.Errorf("the call did not reach the restarted runtime")
	}
}

func TestCodec(t *testing.T) {
	codec := idcodec.New("vm")
	f, _, b := serve(t, &codec)
	f.AddSandboxes(&runtimeapi.PodSandbox{Id: "p1"})
	f.AddContainers(&runtimeapi.Container{Id: "c1", PodSandboxId: "p1", ImageRef: "sha256:aaa", ImageId: "sha256:bbb"})
	rs := b.Runtime()

	t.Run("response IDs are prefixed", func(t *testing.T) {
		resp, err := rs.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Items) != 1 || resp.Items[0].Id != "vm--p1" {
			t.Errorf("ListPodSandbox = %v, want vm--p1", resp.Items)
		}
	})
	t.Run("request IDs are stripped, the caller's request untouched", func(t *testing.T) {
		req := &runtimeapi.ContainerStatusRequest{ContainerId: "vm--c1"}
		resp, err := rs.ContainerStatus(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := f.LastCall("ContainerStatus"); c.Request.(*runtimeapi.ContainerStatusRequest).ContainerId != "c1" {
			t.Errorf("runtime saw container_id %q, want c1", c.Request.(*runtimeapi.ContainerStatusRequest).ContainerId)
		}
		if req.ContainerId != "vm--c1" {
			t.Errorf("the caller's request was changed to %q", req.ContainerId)
		}
		want := &runtimeapi.ContainerStatus{Id: "vm--c1", ImageRef: "sha256:aaa", ImageId: "sha256:bbb"}
		if !proto.Equal(resp.Status, want) {
			t.Errorf("status = %s, want %s", prototext.Format(resp.Status), prototext.Format(want))
		}
	})
	t.Run("filters are stripped", func(t *testing.T) {
		resp, err := rs.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: "vm--p1"}})
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := f.LastCall("ListContainers"); c.Request.(*runtimeapi.ListContainersRequest).Filter.PodSandboxId != "p1" {
			t.Errorf("runtime saw filter %v, want pod_sandbox_id p1", c.Request)
		}
		if len(resp.Containers) != 1 || resp.Containers[0].Id != "vm--c1" || resp.Containers[0].PodSandboxId != "vm--p1" || resp.Containers[0].ImageRef != "sha256:aaa" {
			t.Errorf("containers = %v, want vm--c1 in vm--p1 with its image_ref unchanged", resp.Containers)
		}
	})
	t.Run("new IDs are prefixed", func(t *testing.T) {
		resp, err := rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.PodSandboxId, "vm--ctrd-pod-") {
			t.Errorf("pod_sandbox_id = %q, want it prefixed vm--", resp.PodSandboxId)
		}
	})
	t.Run("streaming request and responses", func(t *testing.T) {
		s, err := rs.StreamContainers(ctx(t), &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "vm--c1"}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for {
			resp, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range resp.Containers {
				ids = append(ids, c.Id)
			}
		}
		if c, _ := f.LastCall("StreamContainers"); c.Request.(*runtimeapi.StreamContainersRequest).Filter.Id != "c1" {
			t.Errorf("runtime saw filter %v, want id c1", c.Request)
		}
		if len(ids) != 1 || ids[0] != "vm--c1" {
			t.Errorf("streamed %v, want [vm--c1]", ids)
		}
	})
	t.Run("GetContainerEvents", func(t *testing.T) {
		f.SetEvents(&runtimeapi.ContainerEventResponse{
			ContainerId:        "c1",
			ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
			PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "p1"},
			ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "c1", ImageId: "sha256:bbb"}},
		})
		c, cancel := context.WithCancel(ctx(t))
		defer cancel()
		s, err := rs.GetContainerEvents(c, &runtimeapi.GetEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		want := &runtimeapi.ContainerEventResponse{
			ContainerId:        "vm--c1",
			ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
			PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "vm--p1"},
			ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "vm--c1", ImageId: "sha256:bbb"}},
		}
		if !proto.Equal(ev, want) {
			t.Errorf("event = %s, want %s", prototext.Format(ev), prototext.Format(want))
		}
	})
	t.Run("image IDs are not prefixed", func(t *testing.T) {
		resp, err := b.Images().PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "disk"}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.ImageRef != "sha256:disk" {
			t.Errorf("image_ref = %q, want sha256:disk", resp.ImageRef)
		}
	})
}

func TestDialRejectsBadEndpoints(t *testing.T) {
	for _, ep := range []string{"", "/run/containerd/containerd.sock", "tcp://127.0.0.1:1", "unix://"} {
		if b, err := containerd.Dial(ep, containerd.Options{}); err == nil {
			b.Close()
			t.Errorf("Dial(%q) succeeded, want an error", ep)
		} else if !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("Dial(%q) error %q does not name the endpoint", ep, err)
		}
	}
}

func TestFactory(t *testing.T) {
	fac := containerd.Factory{Defaults: config.Containerd{Endpoint: "unix:///run/containerd/containerd.sock", CallTimeout: config.Duration{Duration: time.Second}}}
	if k := fac.Key(config.Runtime{Name: "a"}); k != "unix:///run/containerd/containerd.sock" {
		t.Errorf("Key without endpoint = %q, want the default endpoint", k)
	}
	if k := fac.Key(config.Runtime{Name: "b", Endpoint: "unix:///k.sock"}); k != "unix:///k.sock" {
		t.Errorf("Key with endpoint = %q, want it", k)
	}

	// New dials lazily: a runtime that is not up yet is no error.
	f := crifake.New("late")
	path := crifake.SocketPath(t, "late.sock")
	b, err := fac.New(context.Background(), config.Runtime{Name: "late", Endpoint: "unix://" + path}, nil)
	if err != nil {
		t.Fatalf("New before the runtime is up: %v", err)
	}
	defer b.Close()
	crifake.Serve(t, f, path)
	deadline := time.Now().Add(8 * time.Second)
	for {
		_, err := b.Runtime().Version(context.Background(), &runtimeapi.VersionRequest{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Version after the runtime came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, _ := f.LastCall("Version")
	if d, ok := c.Timeout(); !ok || d > time.Second {
		t.Errorf("deadline %v away (set: %v), want the configured call_timeout of 1s", d, ok)
	}
}

// Only a backend whose IDs are shown unchanged offers its connection for
// pass-through (cri/list_raw.go).
func TestRawConnOnlyWithoutCodec(t *testing.T) {
	_, _, plain := serve(t, nil)
	if plain.RawConn() == nil {
		t.Error("RawConn() = nil without a codec")
	}
	codec := idcodec.New("vm")
	_, _, prefixed := serve(t, &codec)
	if prefixed.RawConn() != nil {
		t.Error("RawConn() offered with an ID codec: its answers need rewriting")
	}
}
