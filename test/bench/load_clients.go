package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/loadgen"
	"github.com/crimux/crimux/test/bench/stats"
)

// The load phase's CRI clients: many clients polling crimux as kubelets
// do (the lists, then a container's status), and the probe, one client
// that times ContainerStatus alone, idle and under load.

// probeEvery is the probe's pace: 200 calls a second, a few thousand
// samples in a window without the probe being a load of its own.
const probeEvery = 5 * time.Millisecond

// clientLoad is what the polling clients recorded.
type clientLoad struct {
	lists, status loadgen.Latencies
	outcomes      loadgen.Outcomes
}

// dialClients opens n connections to crimux, one per client.
func (b *bench) dialClients(n int) ([]*criclient.Endpoint, error) {
	out := make([]*criclient.Endpoint, 0, n)
	for i := range n {
		e, err := criclient.Dial(fmt.Sprintf("crimux client %d", i), "unix://"+b.socket)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func closeAll(es []*criclient.Endpoint) {
	for _, e := range es {
		e.Close()
	}
}

// pollRound is one client's round: ListPodSandbox, ListContainers, then
// the status of target.
func pollRound(ctx context.Context, e *criclient.Endpoint, target string, rec *clientLoad) {
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	list := func(f func() error) {
		t, err := stats.Timed(f)
		rec.outcomes.Add(loadgen.Kind(err), err)
		if err == nil {
			rec.lists.Add(t)
		}
	}
	list(func() error { _, err := e.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); return err })
	list(func() error { _, err := e.RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); return err })
	t, err := stats.Timed(func() error { return runningStatus(ctx, e, target) })
	rec.outcomes.Add(loadgen.Kind(err), err)
	if err == nil {
		rec.status.Add(t)
	}
}

// runningStatus is ContainerStatus of id, an error unless it runs.
func runningStatus(ctx context.Context, e *criclient.Endpoint, id string) error {
	resp, err := e.RT.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return fmt.Errorf("ContainerStatus %s through %s: %w", id, e.Name, err)
	}
	if s := resp.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("ContainerStatus %s through %s: %s, not running", id, e.Name, s)
	}
	return nil
}

// probeConns are the probe's connections, of its own: to crimux and to
// containerd's socket.
type probeConns struct{ cri, ctd *criclient.Endpoint }

func dialProbe(containerd, crimux string) (probeConns, error) {
	cri, err := criclient.Dial("crimux (probe)", crimux)
	if err != nil {
		return probeConns{}, err
	}
	ctd, err := criclient.Dial("containerd (probe)", containerd)
	if err != nil {
		cri.Close()
		return probeConns{}, err
	}
	return probeConns{cri: cri, ctd: ctd}, nil
}

func (c probeConns) close() { c.cri.Close(); c.ctd.Close() }

// probeSamples are what the probe recorded in one window: ContainerStatus
// of a VM and of the container through crimux, and of the container on
// containerd's socket.
type probeSamples struct {
	vm, ctr, direct *loadgen.Latencies
	outcomes        *loadgen.Outcomes
	from, to        time.Time // the window
}

// window times ContainerStatus every probeEvery for d, taking turns: a
// VM of vms (the next one each turn), the container ctr through crimux,
// ctr directly.
func (c probeConns) window(ctx context.Context, ctr string, vms []string, d time.Duration) *probeSamples {
	p := &probeSamples{vm: &loadgen.Latencies{}, ctr: &loadgen.Latencies{}, direct: &loadgen.Latencies{},
		outcomes: &loadgen.Outcomes{}, from: time.Now()}
	stop := make(chan struct{})
	turn := 0
	wait := loadgen.Start(stop, 1, probeEvery, 0, func(int) {
		defer func() { turn++ }()
		cctx, cancel := criclient.CallCtx(ctx)
		defer cancel()
		e, id, rec := c.cri, ctr, p.ctr
		switch turn % 3 {
		case 0:
			id, rec = vms[turn/3%len(vms)], p.vm
		case 2:
			e, rec = c.ctd, p.direct
		}
		took, err := stats.Timed(func() error { return runningStatus(cctx, e, id) })
		p.outcomes.Add(loadgen.Kind(err), err)
		if err == nil {
			rec.Add(took)
		}
	})
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	close(stop)
	wait()
	p.to = time.Now()
	return p
}

// throughCrimux are the samples through crimux: the VMs' and the
// container's.
func (p *probeSamples) throughCrimux() stats.Samples {
	return append(p.vm.Samples(), p.ctr.Samples()...)
}
