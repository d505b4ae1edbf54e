package criservice

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// cappedConn hands out the fake's connection with its agent calls capped,
// as virt.Conn does on a host.
type cappedConn struct {
	f     *virtfake.Libvirt
	slots *virt.AgentSlots
}

func (c cappedConn) Get() (virt.Libvirt, error) {
	l, err := c.f.Get()
	if err != nil {
		return nil, err
	}
	return virt.CapAgentCalls(l, c.slots), nil
}

// TestExecSyncPastTheAgentCap: parallel execs into a guest whose agent
// does not answer hold at most the per-VM cap of agent calls; the others
// are refused at once, ResourceExhausted naming the cap (not reported as a
// missing agent), and another VM's stop goes on meanwhile.
func TestExecSyncPastTheAgentCap(t *testing.T) {
	const execs, perVM = 12, 3
	e := coretest.New(t)
	e.R.Conn = cappedConn{e.Libvirt, virt.NewAgentSlots(virt.AgentCaps{PerVM: perVM, PerNode: 8, Wait: 50 * time.Millisecond})}
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	c := e.PutVM(t, "sb", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	answer := make(chan struct{})
	var mu sync.Mutex
	waiting := 0
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		d.Agent = func(string) (string, error) {
			mu.Lock()
			waiting++
			mu.Unlock()
			<-answer // the guest never answers, until the test ends
			return "", errdefs.ErrUnavailable
		}
	})
	e.PutPod(t, "sb2", nil)
	e.PutVM(t, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)

	errs := make(chan error, execs)
	for range execs {
		go func() {
			_, err := s.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: "c1", Cmd: []string{"true"}, Timeout: 20})
			errs <- err
		}()
	}
	for i := range execs - perVM {
		select {
		case err := <-errs:
			if errdefs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "libvirt.agent_calls_per_vm = 3") {
				t.Fatalf("exec %d past the cap: %v (%s), want ResourceExhausted naming the per-VM cap", i, err, errdefs.Code(err))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of the %d execs past the cap were refused; the others wait", i, execs-perVM)
		}
	}
	// The admitted calls hold their slots before they reach libvirt: wait
	// for them to arrive, then none beyond them may have.
	reached := func() int { mu.Lock(); defer mu.Unlock(); return waiting }
	for deadline := time.Now().Add(5 * time.Second); reached() < perVM && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := reached(); n != perVM {
		t.Errorf("%d agent calls reached libvirt, want the cap's %d", n, perVM)
	}
	if _, err := s.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: "c2"}); err != nil {
		t.Fatalf("another VM's stop while the execs wait: %v", err)
	}
	close(answer)
	for range perVM {
		if err := <-errs; errdefs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "guest agent") {
			t.Errorf("an admitted exec into a guest whose agent does not answer: %v, want FailedPrecondition naming the agent", err)
		}
	}
}
