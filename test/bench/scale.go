package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/criclient"
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
	pod, err := b.cri.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: b.hostNetPod(name)})
	if err != nil {
		return "", fmt.Errorf("runp %s: %w", name, err)
	}
	return pod.PodSandboxId, nil
}

// setGuestsPaused pauses (or resumes) the burst's guests through the VM
// API. 50 idle busybox guests under TCG keep both cores busy with their
// timers: the bench pauses them while it makes the scale pods, which took
// 2.5 min beside them, and resumes them before anything is measured.
func (b *bench) setGuestsPaused(ctx context.Context, paused bool) error {
	vms := b.burstVMs
	return criclient.Parallel(len(vms), b.opts.workers, func(i int) error {
		return b.setGuestPaused(ctx, vms[i], paused)
	})
}

// setGuestPaused pauses (or resumes) one VM pod's guest through the VM API.
func (b *bench) setGuestPaused(ctx context.Context, v *vmPod, paused bool) error {
	state := vmv1.PowerState_POWER_STATE_RUNNING
	if paused {
		state = vmv1.PowerState_POWER_STATE_PAUSED
	}
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	_, err := vmv1.NewVMServiceClient(b.cri.Conn).SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: v.container}}, State: state})
	if err != nil {
		return fmt.Errorf("power state of %s: %w", v.name, err)
	}
	return nil
}
