package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
)

// What the load phase runs its load against: VM pods whose guests answer
// exec through their guest agent, and one container pod.

const (
	// vmAgentImage is the test VM with qemu-guest-agent in its initramfs
	// (test/images/vmagent.go), made by make bed.
	vmAgentImage = "127.0.0.1:5117/crimux/vm-busybox-agent:latest"
	// loadVMMiB is the agent image's memory in the e2e tests (the agent
	// and its libraries unpack into the initramfs's tmpfs).
	loadVMMiB = 256
	// agentReadyTimeout bounds a guest's boot until its agent answers
	// (30-40 s under TCG with the guests booting side by side).
	agentReadyTimeout = 3 * time.Minute
)

// loadTargets are the load phase's pods.
type loadTargets struct {
	vms []*vmPod
	ctr containerPodIDs
}

// statusTargets are the containers whose status the CRI clients ask:
// the container pod's first (containerd's, through crimux), then the VMs
// (crimux's own).
func (t loadTargets) statusTargets() []string {
	return append([]string{t.ctr.container}, t.vmContainers()...)
}

// vmContainers are the VMs' containers.
func (t loadTargets) vmContainers() []string {
	var ids []string
	for _, v := range t.vms {
		ids = append(ids, v.container)
	}
	return ids
}

// startLoadTargets starts n VM pods of the agent image at once and a
// container pod, and waits until every guest's agent runs a command.
// What it made is returned even on error, for removeLoadTargets.
func (b *bench) startLoadTargets(ctx context.Context, n int) (loadTargets, error) {
	var t loadTargets
	if err := criclient.Pull(ctx, b.cri, vmAgentImage); err != nil {
		return t, err
	}
	t.vms = make([]*vmPod, n)
	cfg := b.vmContainerConfig(loadVMMiB)
	cfg.Image.Image = vmAgentImage
	start := time.Now()
	err := criclient.Parallel(n, n, func(i int) error {
		var err error
		t.vms[i], err = b.startVMWith(ctx, fmt.Sprintf("load-vm-%d-%d", i, b.podSeq()), cfg, nil)
		return err
	})
	ids, cerr := b.runContainerPod(ctx, b.cri, b.hostNetPod(fmt.Sprintf("load-ctr-%d", b.podSeq())))
	t.ctr = ids
	if err := errors.Join(err, cerr); err != nil {
		return t, err
	}
	err = criclient.Parallel(n, n, func(i int) error { return b.waitAgentExec(ctx, t.vms[i]) })
	b.logf("load: %d VMs of %s, their agents answering exec after %s", n, vmAgentImage, time.Since(start).Round(100*time.Millisecond))
	return t, err
}

// waitAgentExec runs `true` in v's guest through crimux until it works.
func (b *bench) waitAgentExec(ctx context.Context, v *vmPod) error {
	ctx, cancel := context.WithTimeout(ctx, agentReadyTimeout)
	defer cancel()
	err := waitUntil(ctx, time.Second, func() error {
		_, err := b.cri.RT.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: v.container, Cmd: []string{"true"}, Timeout: 10})
		return err
	})
	if err != nil {
		return fmt.Errorf("the guest agent of VM %s: %w", v.name, err)
	}
	return nil
}

// removeLoadTargets removes the phase's pods.
func (b *bench) removeLoadTargets(ctx context.Context, t loadTargets) error {
	ctx = context.WithoutCancel(ctx)
	err := criclient.Parallel(len(t.vms), b.opts.workers, func(i int) error {
		if t.vms[i] == nil {
			return nil
		}
		return b.removeVM(ctx, t.vms[i])
	})
	if t.ctr.pod != "" {
		err = errors.Join(err, criclient.RemovePod(ctx, b.cri, t.ctr.pod))
	}
	return err
}
