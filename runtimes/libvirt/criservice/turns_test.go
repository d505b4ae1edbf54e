package criservice

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/turns"
)

// TestPodStepsWaitForTheirTurn: while the turn of the pod network's
// setup and the one of the VM's definition are held (pods before this
// one), RunPodSandbox runs no CNI plugin and CreateContainer defines no
// domain; each goes on once its turn comes.
func TestPodStepsWaitForTheirTurn(t *testing.T) {
	s, e := newService(t)
	s.Turns.Network, s.Turns.Define = turns.New(1, time.Minute), turns.New(1, time.Minute)
	cfg := podConfig(t, "web")

	held, _ := s.Turns.Network.Take(context.Background())
	pod := make(chan *runtimeapi.RunPodSandboxResponse, 1)
	go func() {
		resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
		if err != nil {
			t.Errorf("RunPodSandbox: %v", err)
		}
		pod <- resp
	}()
	time.Sleep(50 * time.Millisecond)
	if n := len(e.Net.Setups); n != 0 {
		t.Fatalf("%d CNI ADDs while another pod held the network's turn", n)
	}
	held()
	sb := (<-pod).GetPodSandboxId()

	held, _ = s.Turns.Define.Take(context.Background())
	vm := make(chan *runtimeapi.CreateContainerResponse, 1)
	go func() {
		resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{
			PodSandboxId: sb, Config: vmConfig(128, 0, 0), SandboxConfig: cfg})
		if err != nil {
			t.Errorf("CreateContainer: %v", err)
		}
		vm <- resp
	}()
	time.Sleep(50 * time.Millisecond)
	if n := e.Libvirt.Calls("Define"); n != 0 {
		t.Fatalf("%d defines while another VM held the definition's turn", n)
	}
	held()
	startVM(t, s, (<-vm).GetContainerId())
}

// TestTurnWaitEndsWithTheCall: a call whose caller gives up while it
// waits for its turn fails with the caller's deadline and leaves nothing.
func TestTurnWaitEndsWithTheCall(t *testing.T) {
	s, e := newService(t)
	s.Turns.Network = turns.New(1, time.Minute)
	held, _ := s.Turns.Network.Take(context.Background())
	defer held()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig(t, "web"), RuntimeHandler: "vm"})
	wantCode(t, "RunPodSandbox", err, codes.DeadlineExceeded, "waiting for its turn")
	if n := len(e.Net.Setups); n != 0 {
		t.Fatalf("%d CNI ADDs", n)
	}
	if sbs, _ := s.Store.Sandboxes(); len(sbs) != 0 {
		t.Fatalf("%d pod records left", len(sbs))
	}
}
