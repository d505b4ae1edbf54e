package crifake

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func dial(t *testing.T, s *Server) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

func TestFake(t *testing.T) {
	f := New("t")
	s := Serve(t, f, SocketPath(t, "t.sock"))
	rs := dial(t, s)
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	t.Run("records requests and deadlines", func(t *testing.T) {
		if _, err := rs.StopContainer(c, &runtimeapi.StopContainerRequest{ContainerId: "x"}); status.Code(err) != codes.NotFound {
			t.Errorf("StopContainer of an unknown ID = %v, want NotFound", err)
		}
		call, ok := f.LastCall("StopContainer")
		if !ok || call.Request.(*runtimeapi.StopContainerRequest).ContainerId != "x" {
			t.Fatalf("call = %+v, %v", call, ok)
		}
		if d, ok := call.Timeout(); !ok || d > 5*time.Second || d < 4*time.Second {
			t.Errorf("timeout = %v, %v; want about 5s", d, ok)
		}
	})
	t.Run("injected errors, unary and streaming", func(t *testing.T) {
		f.SetError("ListContainers", status.Error(codes.Internal, "boom"))
		f.SetError("StreamContainers", status.Error(codes.Internal, "boom"))
		defer f.SetError("ListContainers", nil)
		defer f.SetError("StreamContainers", nil)
		if _, err := rs.ListContainers(c, &runtimeapi.ListContainersRequest{}); status.Code(err) != codes.Internal {
			t.Errorf("ListContainers = %v, want Internal", err)
		}
		st, err := rs.StreamContainers(c, &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "y"}})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Internal {
			t.Errorf("StreamContainers = %v, want Internal", err)
		}
		if call, ok := f.LastCall("StreamContainers"); !ok || call.Request.(*runtimeapi.StreamContainersRequest).Filter.Id != "y" {
			t.Errorf("stream request not recorded: %+v", call)
		}
	})
	t.Run("replacement handler", func(t *testing.T) {
		f.Handle("Version", func(context.Context, proto.Message) (proto.Message, error) {
			return &runtimeapi.VersionResponse{RuntimeName: "other"}, nil
		})
		defer f.Handle("Version", nil)
		if v, err := rs.Version(c, &runtimeapi.VersionRequest{}); err != nil || v.RuntimeName != "other" {
			t.Errorf("Version = %v, %v", v, err)
		}
	})
	t.Run("lifecycle", func(t *testing.T) {
		run, err := rs.RunPodSandbox(c, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		ctr, err := rs.CreateContainer(c, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: &runtimeapi.ContainerConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs.StartContainer(c, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
			t.Fatal(err)
		}
		st, err := rs.ContainerStatus(c, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ContainerId})
		if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("ContainerStatus = %v, %v; want running", st, err)
		}
		if _, err := rs.RemovePodSandbox(c, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId}); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.RemovePodSandbox(c, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId}); status.Code(err) != codes.NotFound {
			t.Errorf("second RemovePodSandbox = %v, want NotFound", err)
		}
	})
}

func TestServeAgainOnSamePath(t *testing.T) {
	f := New("t")
	path := SocketPath(t, "t.sock")
	s := Serve(t, f, path)
	s.Stop()
	s.Stop() // twice is fine
	s2 := Serve(t, f, path)
	if _, err := dial(t, s2).Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestSocketPathFits(t *testing.T) {
	t.Run(strings.Repeat("a-very-long-subtest-name-", 6), func(t *testing.T) {
		if p := SocketPath(t, "containerd.sock"); len(p) > maxSocketPath {
			t.Errorf("SocketPath = %q (%d bytes), longer than a socket path may be", p, len(p))
		}
	})
}
