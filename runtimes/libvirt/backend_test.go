package libvirt

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// The VM runtime as the registry holds it, with no libvirtd to reach (its
// connection retries in the background): unary calls are answered from
// its store through internal/inproc, with the ID codec, errors keep their
// codes, and streams open over the in-memory connection.
func TestBackendCallsTheRuntime(t *testing.T) {
	dir := t.TempDir()
	f := Factory{
		Options: Options{URI: "qemu:///system?socket=" + filepath.Join(dir, "no-libvirtd.sock"), StateDir: filepath.Join(dir, "state"),
			Instance: "test", StreamingAddr: "127.0.0.1:0"},
		Images: &coretest.Images{}, Cgroups: &coretest.Cgroups{}, Log: coretest.Logger(),
	}
	codec := idcodec.New("vm")
	b, err := f.New(context.Background(), config.Runtime{Name: "vm", Type: config.TypeVM}, &codec)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs := b.Runtime()

	if v, err := rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil || v.GetRuntimeName() == "" {
		t.Errorf("Version = %v, %v", v, err)
	}
	if l, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil || len(l.GetContainers()) != 0 {
		t.Errorf("ListContainers = %v, %v; want none", l, err)
	}
	_, err = rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: codec.Encode("0123456789abcdef0123456789abcdef")})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStatus of an unknown VM = %v, want NotFound", err)
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	if _, err := rs.GetContainerEvents(sctx, &runtimeapi.GetEventsRequest{}); err != nil {
		t.Errorf("GetContainerEvents: %v", err)
	}
}
