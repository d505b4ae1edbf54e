package vmnet_test

import (
	"context"
	"os"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// putVM records pod sbID with VM id in state and power, as coretest's
// PutPod and PutVM leave them.
func putVM(t *testing.T, e *coretest.Env, sbID, id string, state runtimeapi.ContainerState, power vmtypes.PowerState) *store.Container {
	t.Helper()
	e.PutPod(t, sbID, nil)
	return e.PutVM(t, sbID, id, state, power)
}

// netWrap is coretest's pod network with the failures it lacks, and what
// CNI was told of the pod.
type netWrap struct {
	*coretest.Net
	mu                    sync.Mutex
	failPlan, failDHCP    error
	failTap               error
	setupPods, dhcpOfPods []*podnet.Pod
}

func (n *netWrap) Plan(id string) (*podnet.Attachment, error) {
	if n.failPlan != nil {
		return nil, n.failPlan
	}
	return n.Net.Plan(id)
}

func (n *netWrap) Setup(ctx context.Context, p *podnet.Pod, a *podnet.Attachment) error {
	n.mu.Lock()
	n.setupPods = append(n.setupPods, p)
	n.mu.Unlock()
	return n.Net.Setup(ctx, p, a)
}

func (n *netWrap) StartDHCP(p *podnet.Pod, a *podnet.Attachment) error {
	if n.failDHCP != nil {
		return n.failDHCP
	}
	n.mu.Lock()
	n.dhcpOfPods = append(n.dhcpOfPods, p)
	n.mu.Unlock()
	return n.Net.StartDHCP(p, a)
}

func (n *netWrap) OpenTap(a *podnet.Attachment) (*os.File, error) {
	if n.failTap != nil {
		return nil, n.failTap
	}
	return n.Net.OpenTap(a)
}

// wrapNet puts a netWrap in front of the env's pod network.
func wrapNet(e *coretest.Env) *netWrap {
	w := &netWrap{Net: e.Net}
	e.R.Networks.Net = w
	return w
}
