package criservice

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
)

// StartContainer places the VM's cgroup and starts the domain; the qemu
// wrapper moves qemu into that cgroup before qemu runs.
func (r *Service) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, unlock, err := r.LockContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, fmt.Errorf("container %q is %s, not created: %w", c.ID, c.State, errdefs.ErrFailedPrecondition)
	}
	if c.AwaitsMigration() {
		if err := r.arrivals().AwaitIncoming(c); err != nil {
			return nil, err
		}
		return &runtimeapi.StartContainerResponse{}, nil
	}
	if hp, _ := vm.HugePagesFrom(c.Config.GetLinux().GetResources()); hp.PageKiB != 0 {
		if err := hostcaps.CheckHugePages(hp); err != nil { // taken since CreateContainer
			return nil, err
		}
	}
	l, err := r.Conn.Get()
	if err != nil {
		return nil, err
	}
	cg := r.CgroupOf(c)
	if err := r.Cgroups.Create(cg); err != nil {
		return nil, fmt.Errorf("cgroup of %s: %w", c.Domain, err)
	}
	r.Console.Start(c.ID, c.Dir, c.LogPath)
	// A domain running already is a crimux killed after DomainCreate and
	// before recording it: starting again would fail, recording converges.
	restored, err := r.startQemu(ctx, l, c)
	if err != nil {
		r.Console.Stop(c.ID)
		_ = r.Cgroups.Remove(cg)
		return nil, fmt.Errorf("start domain %s: %w", c.Domain, err)
	}
	c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now().UnixNano()
	if err := r.Store.PutContainer(c); err != nil {
		return nil, err
	}
	r.Events.Publish(r.Event(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	if !restored { // a clone runs its template's booted guest
		r.WatchBoot(c, time.Now(), true)
	}
	r.Log.Info("VM started", "container", c.ID, "domain", c.Domain)
	return &runtimeapi.StartContainerResponse{}, nil
}

// StopContainer asks the guest to power off (ACPI) and destroys the VM if
// it has not within the timeout. Stopping a stopped VM succeeds.
func (r *Service) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := r.StopVM(ctx, req.GetContainerId(), time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer destroys and undefines the domain and deletes the VM's
// overlay disk, cgroup and directory. Removing an unknown VM succeeds (at
// the CRI layer: here it is NotFound).
func (r *Service) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := r.Store.Container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer r.Locks.Lock(c.SandboxID)()
	if err := r.RemoveVM(ctx, c.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}
