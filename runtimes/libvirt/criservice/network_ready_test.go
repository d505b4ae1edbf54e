package criservice

import (
	"context"
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// TestNetworkNotReadyRefusesNewPods: a failing CNI STATUS makes the VM
// runtime's NetworkReady false with the plugin's message and refuses a
// new pod (Unavailable, naming it); a pod already there keeps its
// network; once STATUS passes, both recover.
func TestNetworkNotReadyRefusesNewPods(t *testing.T) {
	r, e := newService(t)
	e.PutPod(t, "running", nil)
	e.Net.StatusErr = errors.New(`CNI network not ready: network pods: plugin type="bridge" failed (status): no host-local`)
	resp, err := r.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	net := resp.Status.Conditions[1]
	if net.Type != runtimeapi.NetworkReady || net.Status || net.Reason != "NetworkPluginNotReady" || !strings.Contains(net.Message, "no host-local") {
		t.Fatalf("NetworkReady = %+v, want false with the plugin's message", net)
	}
	_, err = r.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig(t, "new"), RuntimeHandler: "vm"})
	if errdefs.Code(err) != errdefs.Code(errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no host-local") {
		t.Fatalf("RunPodSandbox with the network not ready: %v, want FailedPrecondition with the plugin's message", err)
	}
	if len(e.Net.Teardowns) != 0 {
		t.Fatalf("a running pod's network was touched: %v", e.Net.Teardowns)
	}
	e.Net.StatusErr = nil
	resp, _ = r.Status(context.Background(), &runtimeapi.StatusRequest{})
	if !resp.Status.Conditions[1].Status {
		t.Fatalf("NetworkReady after recovery = %+v", resp.Status.Conditions[1])
	}
	runPod(t, r, podConfig(t, "new"))
}
