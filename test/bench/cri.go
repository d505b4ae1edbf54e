package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/runs"
)

const (
	busyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	vmImage      = "127.0.0.1:5117/crimux/vm-busybox:latest"
	vmMarker     = "CRIMUX-VM-BOOTED"
	namespace    = "crimux-bench"
)

func (b *bench) labels() map[string]string { return map[string]string{runs.Label: b.runID} }

// containerPod is the config of a busybox pod named name.
func (b *bench) containerPod(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: b.runID + "-" + name},
		Labels:   b.labels(),
		// Under the run's cgroup, as kubelet's pods are under its pods'
		// root: the run's end kills what is left there.
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: cgroups.ContainerPods(b.runID)},
	}
}

// hostNetPod is containerPod on the host's network: no CNI plugins to
// run when it is made and removed, which on this host is a third of a
// container pod's cost (2026-12-03). The pods that are only listed or
// counted use it; the pod lifecycle and the status pod keep a network.
func (b *bench) hostNetPod(name string) *runtimeapi.PodSandboxConfig {
	cfg := b.containerPod(name)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}
	return cfg
}

// sleeper is a busybox container that sleeps.
func (b *bench) sleeper() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:  []string{"sleep", "3600"},
		Labels:   b.labels(),
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
}

// containerPodIDs are a running busybox pod and its container.
type containerPodIDs struct{ pod, container string }

// runContainerPod runs pod podCfg with a sleeping busybox container on e.
func (b *bench) runContainerPod(ctx context.Context, e *criclient.Endpoint, podCfg *runtimeapi.PodSandboxConfig) (containerPodIDs, error) {
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	name := podCfg.GetMetadata().GetName()
	pod, err := e.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		return containerPodIDs{}, fmt.Errorf("runp %s: %w", name, err)
	}
	ids := containerPodIDs{pod: pod.PodSandboxId}
	ctr, err := e.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: ids.pod, Config: b.sleeper(), SandboxConfig: podCfg,
	})
	if err != nil {
		return ids, fmt.Errorf("create in %s: %w", name, err)
	}
	ids.container = ctr.ContainerId
	if _, err := e.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ids.container}); err != nil {
		return ids, fmt.Errorf("start in %s: %w", name, err)
	}
	return ids, nil
}

// podLifecycle is one round of runp → create → start → stop → rm → rmp,
// the way kubelet drives a short-lived pod.
func (b *bench) podLifecycle(ctx context.Context, e *criclient.Endpoint, name string) (time.Duration, error) {
	start := time.Now()
	ids, err := b.runContainerPod(ctx, e, b.containerPod(name))
	if err != nil {
		if ids.pod != "" {
			_ = criclient.RemovePod(ctx, e, ids.pod)
		}
		return 0, err
	}
	cctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	if _, err := e.RT.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: ids.container, Timeout: 0}); err != nil {
		_ = criclient.RemovePod(ctx, e, ids.pod)
		return 0, fmt.Errorf("stop %s: %w", ids.container, err)
	}
	if _, err := e.RT.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: ids.container}); err != nil {
		_ = criclient.RemovePod(ctx, e, ids.pod)
		return 0, fmt.Errorf("rm %s: %w", ids.container, err)
	}
	if err := criclient.RemovePod(ctx, e, ids.pod); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
