package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
)

// vmPod is a VM pod made through crimux.
type vmPod struct {
	name, pod, container  string
	cgroupParent, logPath string
	// when RunPodSandbox and CreateContainer returned (the burst's steps)
	sandboxed, created time.Time
}

// domain is the VM's libvirt domain (crimux-<id>, the container ID without
// the runtime's prefix).
func (v *vmPod) domain() string { return vm.DomainName(idcodec.For("vm").Decode(v.container)) }

// vmPodConfig is a VM pod as kubelet sends it: RuntimeClass "vm", a log
// directory and a cgroup parent of the bench's own.
func (b *bench) vmPodConfig(v *vmPod) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: v.name, Namespace: namespace, Uid: b.runID + "-" + v.name},
		Labels:       b.labels(),
		LogDirectory: filepath.Dir(v.logPath),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: v.cgroupParent},
	}
}

func (b *bench) vmContainerConfig(mib int) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "vm"},
		Image:    &runtimeapi.ImageSpec{Image: vmImage},
		LogPath:  "vm.log",
		Labels:   b.labels(),
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			MemoryLimitInBytes: int64(mib) << 20,
		}},
	}
}

// newVMPod names a VM pod and makes its log directory (kubelet's job).
func (b *bench) newVMPod(name string) (*vmPod, error) {
	b.mu.Lock()
	b.vmSeq++
	n := b.vmSeq
	b.mu.Unlock()
	logDir := filepath.Join(b.dir, "logs", name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	return &vmPod{
		name: name, logPath: filepath.Join(logDir, "vm.log"),
		cgroupParent: fmt.Sprintf("%s/%s-pod%d", cgroups.Root, b.runID, n),
	}, nil
}

// startVM is RunPodSandbox + CreateContainer + StartContainer of a VM pod
// through crimux; the pod is remembered for cleanup even when a step fails.
func (b *bench) startVM(ctx context.Context, name string, mib int) (*vmPod, error) {
	return b.startVMWith(ctx, name, b.vmContainerConfig(mib), nil)
}

// startVMWith is startVM of any container config; edit (may be nil)
// changes the pod's config.
func (b *bench) startVMWith(ctx context.Context, name string, ctrCfg *runtimeapi.ContainerConfig, edit func(*runtimeapi.PodSandboxConfig)) (*vmPod, error) {
	v, err := b.createVM(ctx, name, ctrCfg, edit)
	if err != nil {
		return v, err
	}
	return v, b.startContainer(ctx, v, criclient.CallTimeout)
}

// startContainer is StartContainer of v's VM, given timeout (kubelet's
// runtime request timeout is 2 minutes, criclient.CallTimeout).
func (b *bench) startContainer(ctx context.Context, v *vmPod, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := b.cri.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: v.container}); err != nil {
		return fmt.Errorf("start VM %s: %w", v.name, err)
	}
	return nil
}

// createVM is RunPodSandbox + CreateContainer of a VM pod: its domain is
// defined, not started.
func (b *bench) createVM(ctx context.Context, name string, ctrCfg *runtimeapi.ContainerConfig, edit func(*runtimeapi.PodSandboxConfig)) (*vmPod, error) {
	v, err := b.newVMPod(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	cfg := b.vmPodConfig(v)
	if edit != nil {
		edit(cfg)
	}
	pod, err := b.cri.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
	if err != nil {
		return v, fmt.Errorf("runp VM %s: %w", name, err)
	}
	v.pod, v.sandboxed = pod.PodSandboxId, time.Now()
	b.trackVM(v)
	ctr, err := b.cri.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: v.pod, Config: ctrCfg, SandboxConfig: cfg,
	})
	if err != nil {
		return v, fmt.Errorf("create VM %s: %w", name, err)
	}
	v.container, v.created = ctr.ContainerId, time.Now()
	return v, nil
}

func (b *bench) trackVM(v *vmPod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vms = append(b.vms, v)
}

// removeVM stops and removes a VM pod through crimux (the VM is
// destroyed at once: StopContainer with no grace) and its cgroup parent.
func (b *bench) removeVM(ctx context.Context, v *vmPod) error {
	if v.pod == "" {
		return nil
	}
	cctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	if v.container != "" {
		_, _ = b.cri.RT.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: v.container, Timeout: 0})
	}
	if err := criclient.RemovePod(ctx, b.cri, v.pod); err != nil {
		return err
	}
	b.mu.Lock()
	for i, w := range b.vms {
		if w == v {
			b.vms = append(b.vms[:i], b.vms[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	cgroups.Remove(v.cgroupParent)
	return nil
}

// waitRunning waits until ContainerStatus reports the VM running.
func (b *bench) waitRunning(ctx context.Context, v *vmPod) error {
	return waitUntil(ctx, 10*time.Millisecond, func() error {
		cctx, cancel := criclient.CallCtx(ctx)
		defer cancel()
		st, err := b.cri.RT.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: v.container})
		if err != nil {
			return err
		}
		if s := st.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return fmt.Errorf("VM %s is %s", v.name, s)
		}
		return nil
	})
}

// waitMarker waits until file holds the guest's boot marker.
func waitMarker(ctx context.Context, file string, timeout time.Duration) error {
	return waitMarkerEvery(ctx, file, timeout, 5*time.Millisecond)
}

// waitMarkerEvery reads file at once and then every interval.
func waitMarkerEvery(ctx context.Context, file string, timeout, interval time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return waitUntil(ctx, interval, func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte(vmMarker)) {
			return fmt.Errorf("no %s in %s yet (%d bytes)", vmMarker, file, len(b))
		}
		return nil
	})
}
