package core

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/snapcarry"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Exit codes of a VM, as a container's: a clean guest power-off is 0, a
// VM destroyed after its grace period 137 (SIGKILL's), a crash 139.
const (
	ExitClean    = 0
	ExitKilled   = 137
	ExitCrashed  = 139
	pollInterval = 100 * time.Millisecond
)

// StopVM stops the VM of container id under its pod's lock: ACPI power
// off, destroyed after grace (at once for a SIGKILL stop signal).
func (r *Runtime) StopVM(ctx context.Context, id string, grace time.Duration) error {
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return err
	}
	defer unlock()
	return r.StopVMLocked(ctx, c, grace)
}

// StopVMLocked stops a VM; the caller holds its pod's lock.
func (r *Runtime) StopVMLocked(ctx context.Context, c *store.Container, grace time.Duration) error {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil
	}
	if c.AwaitsMigration() {
		return r.stopWaitingTarget(c)
	}
	if killedAtStop(c.Config) {
		grace = 0
	}
	l, err := r.Conn.Get()
	if err != nil {
		return err
	}
	r.resumeIfPaused(l, c)
	code, reason, err := ShutdownDomain(ctx, l, c.Domain, grace)
	if err != nil {
		return fmt.Errorf("stop domain %s: %w", c.Domain, err)
	}
	return r.SaveExit(c, code, reason, "")
}

// killedAtStop: a VM whose container's stop signal is SIGKILL is
// destroyed at once, as a container's processes would be killed: no ACPI
// press, no grace. The default and SIGTERM are the ACPI press; the table
// (converter/vm/crifields) refuses every other signal. The signal comes
// from the container's kept config, so records need no new field (and an
// older crimux reading one stops the VM the gentle way).
func killedAtStop(cfg *runtimeapi.ContainerConfig) bool {
	return cfg.GetStopSignal() == runtimeapi.Signal_SIGNAL_SIGKILL
}

// ShutdownDomain powers a domain off: ACPI first, destroy after grace.
func ShutdownDomain(ctx context.Context, l virt.Libvirt, name string, grace time.Duration) (int32, string, error) {
	dom, err := l.Lookup(name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return ExitKilled, "DomainGone", nil
		}
		return 0, "", err
	}
	if off, err := IsShutoff(l, dom); err != nil || off {
		return ExitClean, "Completed", err
	}
	if grace > 0 {
		if err := l.Shutdown(dom); err == nil {
			deadline := time.Now().Add(grace)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if off, err := IsShutoff(l, dom); err == nil && off {
					return ExitClean, "Completed", nil
				}
				time.Sleep(pollInterval)
			}
		}
	}
	if err := l.Destroy(dom); err != nil {
		if off, serr := IsShutoff(l, dom); serr == nil && off {
			return ExitClean, "Completed", nil
		}
		return 0, "", err
	}
	return ExitKilled, "Killed", nil
}

// IsShutoff reports whether libvirt says the domain is shut off.
func IsShutoff(l virt.Libvirt, dom virt.Domain) (bool, error) {
	state, err := l.State(dom)
	if err != nil {
		return false, err
	}
	return state == virt.StateShutoff, nil
}

// MarkExited records a VM's end in c once (the first cause wins: an event
// and a stop can race); false when c had exited already.
func (r *Runtime) MarkExited(c *store.Container, code int32, reason, msg string) bool {
	if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		return false
	}
	c.State, c.FinishedAt, c.ExitCode, c.Reason, c.Message = runtimeapi.ContainerState_CONTAINER_EXITED, time.Now().UnixNano(), code, reason, msg
	r.Console.Stop(c.ID)
	r.Boots.Forget(c.ID)
	return true
}

// SaveExit records a VM's end (MarkExited) in the store and then, once it
// is saved, publishes the STOPPED event, which carries the exit.
func (r *Runtime) SaveExit(c *store.Container, code int32, reason, msg string) error {
	changed := r.MarkExited(c, code, reason, msg)
	if err := r.Store.PutContainer(c); err != nil {
		return err
	}
	if changed {
		r.Events.Publish(r.Event(c, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT))
	}
	return nil
}

// RemoveVM tears a VM down; the caller holds the pod's lock. Teardown
// converges: the record is marked Removing first (from then on the VM is
// gone for CRI), every step is idempotent, and the record is deleted only
// when every resource is confirmed gone. A step that fails (libvirtd
// down) leaves the record for the collector, which retries with backoff,
// across restarts, until it succeeds.
func (r *Runtime) RemoveVM(ctx context.Context, id string) error {
	c, err := r.Store.Container(id)
	if err != nil {
		return err
	}
	c.Removing = true
	if err := r.Store.PutContainer(c); err != nil {
		return err
	}
	r.Migration.Forget(c.ID) // a target's VM may arrive no more
	r.Console.Stop(c.ID)
	r.Boots.Forget(c.ID)
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil && sb.ContainerID == c.ID {
		sb.ContainerID = ""
		if err := r.Store.PutSandbox(sb); err != nil {
			return err
		}
	}
	r.Events.Publish(r.Event(c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT))
	if err := r.Teardown(c); err != nil {
		r.Log.Warn("VM teardown incomplete; the collector will retry", "container", c.ID, "domain", c.Domain, "err", err)
		return nil
	}
	r.Log.Info("VM removed", "container", c.ID, "domain", c.Domain)
	return nil
}

// Teardown deletes a VM's domain, cgroup and files, then its record.
func (r *Runtime) Teardown(c *store.Container) error {
	l, err := r.Conn.Get()
	if err != nil {
		return err
	}
	if err := (snapcarry.Carrier{StateDir: r.Opts.StateDir, Store: r.Store}).Keep(l, c); err != nil {
		r.Log.Warn("snapshots of a removed VM not kept for its pod's next one", "container", c.ID, "err", err)
	}
	if err := DestroyAndUndefine(l, c.Domain); err != nil {
		return fmt.Errorf("remove domain %s: %w", c.Domain, err)
	}
	if c.CgroupParent != "" { // "": adopted without a placed qemu
		if err := r.Cgroups.Remove(r.CgroupOf(c)); err != nil {
			return fmt.Errorf("remove cgroup of %s: %w", c.Domain, err)
		}
	}
	if err := rootvol.RemoveVMDir(c.Dir); err != nil {
		return fmt.Errorf("remove VM files %s: %w", c.Dir, err)
	}
	return r.Store.DeleteContainer(c.ID)
}

// DestroyAndUndefine removes a domain whatever its state; a missing
// domain is already removed.
func DestroyAndUndefine(l virt.Libvirt, name string) error {
	dom, err := l.Lookup(name)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if off, err := IsShutoff(l, dom); err == nil && !off {
		if err := l.Destroy(dom); err != nil && !errdefs.IsNotFound(err) {
			if off, _ := IsShutoff(l, dom); !off {
				return err
			}
		}
	}
	if err := l.Undefine(dom); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// LockContainer loads a container and takes its pod's lock.
func (r *Runtime) LockContainer(id string) (*store.Container, func(), error) {
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, nil, err
	}
	unlock := r.Locks.Lock(c.SandboxID)
	// Reload under the lock: another call may have changed it meanwhile.
	if c, err = r.Store.Container(id); err != nil {
		unlock()
		return nil, nil, err
	}
	return c, unlock, nil
}
