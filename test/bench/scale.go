package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// The scale figures' pods: beside the container pods and the running
// burst VMs, VM pods whose domain is defined but never started, and
// pause-only container pods on the host's network (a sandbox with no
// container: a record in containerd, a pause process, no CNI address).

// scaleUp adds stopped VM pods (up to -scale-stopped-vms) and pause-only
// pods until the bench keeps -scale-pods pods.
func (b *bench) scaleUp(ctx context.Context) error {
	have := len(b.pods) + len(b.burstVMs) + len(b.stoppedVMs) + len(b.pausePods)
	vms := max(0, min(b.opts.scaleStoppedVMs-len(b.stoppedVMs), b.opts.scalePods-have))
	pause := max(0, b.opts.scalePods-have-vms)
	t0 := time.Now()
	made := make([]*vmPod, vms)
	vmErr := criclient.Parallel(vms, b.opts.workers, func(i int) error {
		v, err := b.createVM(ctx, fmt.Sprintf("stopped-%d", i), b.vmContainerConfig(b.opts.burstMiB), nil)
		if err == nil {
			made[i] = v
		}
		return err
	})
	for _, v := range made {
		if v != nil {
			b.stoppedVMs = append(b.stoppedVMs, v)
		}
	}
	b.logf("scale: %d stopped VM pods in %s", len(b.stoppedVMs), time.Since(t0).Round(100*time.Millisecond))
	t1 := time.Now()
	ids := make([]string, pause)
	podErr := criclient.Parallel(pause, b.opts.workers, func(i int) error {
		id, err := b.runPausePod(ctx, fmt.Sprintf("pause-%d-%d", i, b.podSeq()))
		ids[i] = id
		return err
	})
	for _, id := range ids {
		if id != "" {
			b.pausePods = append(b.pausePods, id)
		}
	}
	b.logf("scale: %d pause-only pods in %s", len(b.pausePods), time.Since(t1).Round(100*time.Millisecond))
	if vmErr != nil {
		return vmErr
	}
	return podErr
}

// runPausePod runs a pod with no container on the host's network,
// through crimux (containerd's, by its runtime handler).
func (b *bench) runPausePod(ctx context.Context, name string) (string, error) {
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	cfg := b.containerPod(name)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}
	pod, err := b.cri.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("runp %s: %w", name, err)
	}
	return pod.PodSandboxId, nil
}

// scaleCalls is how many ListContainers calls per path the scale figure
// makes (a list of 1,000 pods' containers takes a few ms).
const scaleCalls = 200

// listContainersRatio records ListContainers through crimux over
// containerd's, with every pod the bench keeps.
func (b *bench) listContainersRatio(ctx context.Context, name string) error {
	var sizes [2]int
	one := func(p stats.Path) (time.Duration, error) {
		var n int
		t, err := stats.Timed(func() error {
			r, err := b.endpointOf(p).RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			n = len(r.GetContainers())
			return err
		})
		sizes[p] = n
		return t, err
	}
	if _, _, err := stats.Alternate(10, 5, one); err != nil {
		return err
	}
	cpu0 := b.crimux.CPUTime()
	d, c, err := stats.Alternate(scaleCalls, 5, one)
	if err != nil {
		return err
	}
	perCall := (b.crimux.CPUTime() - cpu0) / scaleCalls
	b.samplesOf("ListContainersScale", d, c)
	b.res.Set(name, stats.Ratio(c.Median(), d.Median()), c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	b.res.Note(name, "%d VM pods (%d running), %d container pods (%d with a container); the lists held %d containers through crimux, %d direct; crimux used %.0f µs of CPU per call",
		len(b.burstVMs)+len(b.stoppedVMs), len(b.burstVMs), len(b.pods)+len(b.pausePods), len(b.pods),
		sizes[stats.ViaCrimux], sizes[stats.Direct], stats.Micros(perCall))
	b.logf("ListContainers at scale (%d through crimux, %d direct): crimux %s; direct %s", sizes[stats.ViaCrimux], sizes[stats.Direct],
		c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	return nil
}

// setGuestsPaused pauses (or resumes) the burst's guests through the VM
// API. 50 idle busybox guests under TCG keep both cores busy with their
// timers: the bench pauses them while it makes the scale pods, which took
// 2.5 min beside them, and resumes them before anything is measured.
func (b *bench) setGuestsPaused(ctx context.Context, paused bool) error {
	state := vmv1.PowerState_POWER_STATE_RUNNING
	if paused {
		state = vmv1.PowerState_POWER_STATE_PAUSED
	}
	vmapi := vmv1.NewVMServiceClient(b.cri.Conn)
	vms := b.burstVMs
	return criclient.Parallel(len(vms), b.opts.workers, func(i int) error {
		ctx, cancel := criclient.CallCtx(ctx)
		defer cancel()
		_, err := vmapi.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: vms[i].container}}, State: state})
		if err != nil {
			return fmt.Errorf("power state of %s: %w", vms[i].name, err)
		}
		return nil
	})
}
