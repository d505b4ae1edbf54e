package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	busyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	vmImage      = "127.0.0.1:5117/crimux/vm-busybox:latest"
	vmMarker     = "CRIMUX-VM-BOOTED"
	namespace    = "crimux-bench"
	// runLabel marks everything the bench makes with its run ID, so that
	// cleanup finds it and lists can count it among other users' pods.
	runLabel = "crimux-bench-run"
	// callTimeout bounds one CRI call.
	callTimeout = 2 * time.Minute
)

// endpoint is a CRI server: crimux or containerd.
type endpoint struct {
	name string
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	img  runtimeapi.ImageServiceClient
}

func dial(name, addr string) (*endpoint, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", name, addr, err)
	}
	return &endpoint{name: name, conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), img: runtimeapi.NewImageServiceClient(conn)}, nil
}

func (e *endpoint) close() { _ = e.conn.Close() }

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

func (b *bench) labels() map[string]string { return map[string]string{runLabel: b.runID} }

// containerPod is the config of a busybox pod named name.
func (b *bench) containerPod(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: b.runID + "-" + name},
		Labels:   b.labels(),
		Linux:    &runtimeapi.LinuxPodSandboxConfig{},
	}
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

// runContainerPod runs a busybox pod with a sleeping container on e.
func (b *bench) runContainerPod(ctx context.Context, e *endpoint, name string) (containerPodIDs, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	podCfg := b.containerPod(name)
	pod, err := e.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		return containerPodIDs{}, fmt.Errorf("runp %s: %w", name, err)
	}
	ids := containerPodIDs{pod: pod.PodSandboxId}
	ctr, err := e.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: ids.pod, Config: b.sleeper(), SandboxConfig: podCfg,
	})
	if err != nil {
		return ids, fmt.Errorf("create in %s: %w", name, err)
	}
	ids.container = ctr.ContainerId
	if _, err := e.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ids.container}); err != nil {
		return ids, fmt.Errorf("start in %s: %w", name, err)
	}
	return ids, nil
}

// removePod stops and removes a pod with its containers on e.
func removePod(ctx context.Context, e *endpoint, podID string) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("stopp %s: %w", podID, err)
	}
	if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("rmp %s: %w", podID, err)
	}
	return nil
}

// podLifecycle is one round of runp → create → start → stop → rm → rmp,
// the way kubelet drives a short-lived pod.
func (b *bench) podLifecycle(ctx context.Context, e *endpoint, name string) (time.Duration, error) {
	start := time.Now()
	ids, err := b.runContainerPod(ctx, e, name)
	if err != nil {
		if ids.pod != "" {
			_ = removePod(ctx, e, ids.pod)
		}
		return 0, err
	}
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if _, err := e.rt.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: ids.container, Timeout: 0}); err != nil {
		_ = removePod(ctx, e, ids.pod)
		return 0, fmt.Errorf("stop %s: %w", ids.container, err)
	}
	if _, err := e.rt.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: ids.container}); err != nil {
		_ = removePod(ctx, e, ids.pod)
		return 0, fmt.Errorf("rm %s: %w", ids.container, err)
	}
	if err := removePod(ctx, e, ids.pod); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// pull pulls an image through e unless it is there.
func pull(ctx context.Context, e *endpoint, image string) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	st, err := e.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	if err == nil && st.GetImage() != nil {
		return nil
	}
	if _, err := e.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		return fmt.Errorf("pull %s through %s: %w", image, e.name, err)
	}
	return nil
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error (every call runs regardless).
func parallel(n, workers int, f func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, n)
	for range max(1, workers) {
		go func() {
			for i := range next {
				errs <- f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
