package core

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
	"github.com/crimux/crimux/vmtypes"
)

// StatusOf is the CRI status of a live VM container, from the store.
func (r *Runtime) StatusOf(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, err
	}
	st := ContainerStatus(c)
	if reason, msg, ok := r.bootStatus(c); ok && st.Reason == "" {
		st.Reason, st.Message = reason, msg
	}
	if reason, msg, ok := r.NoSpace.Status(c.Domain); ok && st.Reason == "" {
		st.Reason, st.Message = reason, msg
	}
	return st, nil
}

// ContainerStatus is the CRI status of a VM container record.
func ContainerStatus(c *store.Container) *runtimeapi.ContainerStatus {
	reason, message := c.Reason, c.Message
	if pr, pm, ok := PowerStatus(c); ok {
		reason, message = pr, pm
	}
	return &runtimeapi.ContainerStatus{
		Id: c.ID, Metadata: c.Config.GetMetadata(), State: c.State,
		CreatedAt: c.CreatedAt, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, ExitCode: c.ExitCode,
		Image: c.Config.GetImage(), ImageRef: c.ImageRef, Reason: reason, Message: message,
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(), LogPath: c.LogPath,
		Resources: &runtimeapi.ContainerResources{Linux: c.Config.GetLinux().GetResources()},
	}
}

// Event makes the CRI event of a change of c, carrying c's status as it
// is now (the change made), none for a container deleted.
func (r *Runtime) Event(c *store.Container, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	ev := &runtimeapi.ContainerEventResponse{ContainerId: c.ID, ContainerEventType: typ, CreatedAt: time.Now().UnixNano()}
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil {
		ev.PodSandboxStatus = SandboxStatus(sb)
	}
	if typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		ev.ContainersStatuses = []*runtimeapi.ContainerStatus{ContainerStatus(c)}
	}
	return ev
}

// SandboxStatus is the CRI status of a VM pod, from its record.
func SandboxStatus(sb *store.Sandbox) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: sb.ID, Metadata: sb.Config.GetMetadata(), State: sb.State, CreatedAt: sb.CreatedAt,
		Network: vmnet.PodStatus(sb),
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.Handler,
	}
}

// PodName is a pod's namespace/name, for logs.
func PodName(cfg *runtimeapi.PodSandboxConfig) string {
	return cfg.GetMetadata().GetNamespace() + "/" + cfg.GetMetadata().GetName()
}

// SandboxWithContainers reads a pod and its containers from the store.
func (r *Runtime) SandboxWithContainers(id string) (*store.Sandbox, []*store.Container, error) {
	sb, err := r.Store.Sandbox(id)
	if err != nil {
		return nil, nil, err
	}
	ctrs, err := r.Store.ContainersOf(sb.ID)
	if err != nil {
		return nil, nil, err
	}
	return sb, ctrs, nil
}

// PowerStatus is what ContainerStatus shows of a power state other than
// Running: the container stays CONTAINER_RUNNING, the reason says why the
// guest does not run.
func PowerStatus(c *store.Container) (reason, message string, ok bool) {
	switch c.Power() {
	case vmtypes.PowerPaused:
		return "Paused", "VM paused by its user (crimux VM API): vCPUs suspended, memory kept", true
	case vmtypes.PowerShutdown:
		return "Shutdown", "VM shut down by its user (crimux VM API): domain and disk kept, power it Running to boot it", true
	case vmtypes.PowerHibernate:
		return "Hibernated", "VM hibernated by its user (crimux VM API): memory saved to disk, power it Running to resume it", true
	}
	return "", "", false
}

// ResumeConsoles restarts the copiers of running VMs after a crimux start.
func (r *Runtime) ResumeConsoles() {
	recs, err := r.Store.LiveContainers()
	if err != nil {
		return
	}
	for _, c := range recs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			r.Console.Start(c.ID, c.Dir, c.LogPath)
			if c.Power() == vmtypes.PowerRunning {
				r.WatchBoot(c, time.Unix(0, c.StartedAt), false)
			}
		}
	}
}
