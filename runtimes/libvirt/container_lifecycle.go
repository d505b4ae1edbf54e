package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// undefineFlags drop everything libvirt keeps for a domain.
const undefineFlags = golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata | golibvirt.DomainUndefineNvram

// Exit codes of a VM, as a container's: a clean guest power-off is 0, a
// VM destroyed after its grace period 137 (SIGKILL's), a crash 139.
const (
	exitClean    = 0
	exitKilled   = 137
	exitCrashed  = 139
	pollInterval = 100 * time.Millisecond
)

// StartContainer places the VM's cgroup and starts the domain; the qemu
// wrapper moves qemu into that cgroup before qemu runs.
func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, unlock, err := r.lockContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, fmt.Errorf("container %q is %s, not created: %w", c.ID, c.State, errdefs.ErrFailedPrecondition)
	}
	l, err := r.conn.get()
	if err != nil {
		return nil, err
	}
	cg := r.cgroupOf(c)
	if err := r.cgroups.Create(cg); err != nil {
		return nil, fmt.Errorf("cgroup of %s: %w", c.Domain, err)
	}
	r.console.start(c)
	dom, err := l.DomainLookupByName(c.Domain)
	if err == nil {
		// Running already: a crimux killed after DomainCreate and before
		// recording it. Starting again would fail; recording it converges.
		if off, serr := isShutoff(l, dom); serr != nil || off {
			err = l.DomainCreate(dom)
		}
	}
	if err != nil {
		r.console.stop(c.ID)
		_ = r.cgroups.Remove(cg)
		return nil, fmt.Errorf("start domain %s: %w", c.Domain, classify(err))
	}
	c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now().UnixNano()
	if err := r.store.putContainer(c); err != nil {
		return nil, err
	}
	r.events.publish(r.event(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	r.log.Info("VM started", "container", c.ID, "domain", c.Domain)
	return &runtimeapi.StartContainerResponse{}, nil
}

// StopContainer asks the guest to power off (ACPI) and destroys the VM if
// it has not within the timeout. Stopping a stopped VM succeeds.
func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := r.stopVM(ctx, req.GetContainerId(), time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *Runtime) stopVM(ctx context.Context, id string, grace time.Duration) error {
	c, unlock, err := r.lockContainer(id)
	if err != nil {
		return err
	}
	defer unlock()
	return r.stopVMLocked(ctx, c, grace)
}

// stopVMLocked stops a VM; the caller holds its pod's lock.
func (r *Runtime) stopVMLocked(ctx context.Context, c *containerRecord, grace time.Duration) error {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	l, err := r.conn.get()
	if err != nil {
		return err
	}
	r.resumeIfPaused(l, c)
	code, reason, err := shutdownDomain(ctx, l, c.Domain, grace)
	if err != nil {
		return fmt.Errorf("stop domain %s: %w", c.Domain, err)
	}
	r.markExited(c, code, reason, "")
	return r.store.putContainer(c)
}

// shutdownDomain powers a domain off: ACPI first, destroy after grace.
func shutdownDomain(ctx context.Context, l *golibvirt.Libvirt, name string, grace time.Duration) (int32, string, error) {
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		if golibvirt.IsNotFound(err) {
			return exitKilled, "DomainGone", nil
		}
		return 0, "", classify(err)
	}
	if off, err := isShutoff(l, dom); err != nil || off {
		return exitClean, "Completed", err
	}
	if grace > 0 {
		if err := l.DomainShutdown(dom); err == nil {
			deadline := time.Now().Add(grace)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if off, err := isShutoff(l, dom); err == nil && off {
					return exitClean, "Completed", nil
				}
				time.Sleep(pollInterval)
			}
		}
	}
	if err := l.DomainDestroy(dom); err != nil {
		if off, serr := isShutoff(l, dom); serr == nil && off {
			return exitClean, "Completed", nil
		}
		return 0, "", classify(err)
	}
	return exitKilled, "Killed", nil
}

func isShutoff(l *golibvirt.Libvirt, dom golibvirt.Domain) (bool, error) {
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return false, classify(err)
	}
	return golibvirt.DomainState(state) == golibvirt.DomainShutoff, nil
}

// markExited records a VM's end once (the first cause wins: an event and a
// stop can race).
func (r *Runtime) markExited(c *containerRecord, code int32, reason, msg string) {
	if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	c.State, c.FinishedAt, c.ExitCode, c.Reason, c.Message = runtimeapi.ContainerState_CONTAINER_EXITED, time.Now().UnixNano(), code, reason, msg
	r.console.stop(c.ID)
	r.events.publish(r.event(c, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT))
}

// RemoveContainer destroys and undefines the domain and deletes the VM's
// overlay disk, cgroup and directory. Removing an unknown VM succeeds (at
// the CRI layer: here it is NotFound).
func (r *Runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := r.store.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer r.locks.lock(c.SandboxID)()
	if err := r.removeVM(ctx, c.ID); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// removeVM tears a VM down; the caller holds the pod's lock. Teardown
// converges: the record is marked Removing first (from then on the VM is
// gone for CRI), every step is idempotent, and the record is deleted only
// when every resource is confirmed gone. A step that fails (libvirtd
// down) leaves the record for the collector, which retries with backoff,
// across restarts, until it succeeds.
func (r *Runtime) removeVM(ctx context.Context, id string) error {
	c, err := r.store.container(id)
	if err != nil {
		return err
	}
	c.Removing = true
	if err := r.store.putContainer(c); err != nil {
		return err
	}
	r.console.stop(c.ID)
	if sb, err := r.store.sandbox(c.SandboxID); err == nil && sb.ContainerID == c.ID {
		sb.ContainerID = ""
		if err := r.store.putSandbox(sb); err != nil {
			return err
		}
	}
	r.events.publish(r.event(c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT))
	if err := r.teardown(c); err != nil {
		r.log.Warn("VM teardown incomplete; the collector will retry", "container", c.ID, "domain", c.Domain, "err", err)
		return nil
	}
	r.log.Info("VM removed", "container", c.ID, "domain", c.Domain)
	return nil
}

// teardown deletes a VM's domain, cgroup and files, then its record.
func (r *Runtime) teardown(c *containerRecord) error {
	l, err := r.conn.get()
	if err != nil {
		return err
	}
	if err := destroyAndUndefine(l, c.Domain); err != nil {
		return fmt.Errorf("remove domain %s: %w", c.Domain, err)
	}
	if c.CgroupParent != "" { // "": adopted without a placed qemu
		if err := r.cgroups.Remove(r.cgroupOf(c)); err != nil {
			return fmt.Errorf("remove cgroup of %s: %w", c.Domain, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("remove VM files %s: %w", c.Dir, err)
	}
	return r.store.deleteContainer(c.ID)
}

// destroyAndUndefine removes a domain whatever its state; a missing
// domain is already removed.
func destroyAndUndefine(l *golibvirt.Libvirt, name string) error {
	dom, err := l.DomainLookupByName(name)
	if golibvirt.IsNotFound(err) {
		return nil
	} else if err != nil {
		return classify(err)
	}
	if off, err := isShutoff(l, dom); err == nil && !off {
		if err := l.DomainDestroy(dom); err != nil && !golibvirt.IsNotFound(err) {
			if off, _ := isShutoff(l, dom); !off {
				return classify(err)
			}
		}
	}
	if err := l.DomainUndefineFlags(dom, undefineFlags); err != nil && !golibvirt.IsNotFound(err) {
		return classify(err)
	}
	return nil
}

// lockContainer loads a container and takes its pod's lock.
func (r *Runtime) lockContainer(id string) (*containerRecord, func(), error) {
	c, err := r.store.container(id)
	if err != nil {
		return nil, nil, err
	}
	unlock := r.locks.lock(c.SandboxID)
	// Reload under the lock: another call may have changed it meanwhile.
	if c, err = r.store.container(id); err != nil {
		unlock()
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil, err
		}
		return nil, nil, err
	}
	return c, unlock, nil
}
