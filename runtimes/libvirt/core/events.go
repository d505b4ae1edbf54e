package core

import (
	"context"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// OnConnect runs on every libvirtd (re)connect: it follows lifecycle and
// reboot events (libvirt's, not polling) for as long as the connection
// lives and catches up with what happened while crimux was not listening:
// resync, then AfterResync (the collector's pass). Recovered is closed
// after the first.
func (r *Runtime) OnConnect(ctx context.Context, l virt.Libvirt) {
	lifecycle, err := l.LifecycleEvents(ctx)
	if err != nil {
		r.Log.Error("subscribe to libvirt lifecycle events", "err", err)
	}
	reboots, err := l.RebootEvents(ctx)
	if err != nil {
		r.Log.Error("subscribe to libvirt reboot events", "err", err)
	} else {
		defer r.Reboots.Follow(l)()
	}
	r.resync(l)
	first := r.firstConnect.CompareAndSwap(false, true)
	if r.AfterResync != nil {
		r.AfterResync(ctx, first)
	}
	if first {
		close(r.recovered)
	}
	for lifecycle != nil || reboots != nil {
		select {
		case ev, ok := <-lifecycle:
			if !ok {
				lifecycle = nil
				continue
			}
			r.onLifecycle(ev)
		case name, ok := <-reboots:
			if !ok {
				reboots = nil
				continue
			}
			r.Reboots.Fire(name)
			if r.AfterReboot != nil {
				r.AfterReboot(ctx, l, name)
			}
		}
	}
}

// onLifecycle records the exit of a crimux VM that stopped.
func (r *Runtime) onLifecycle(ev virt.LifecycleEvent) {
	if !strings.HasPrefix(ev.Domain, vm.DomainName("")) {
		return
	}
	if ev.PausedIOError {
		r.NoSpace.OnPaused(ev.Domain)
		return
	}
	if !ev.Stopped {
		return
	}
	code, reason := exitOf(ev.Why)
	r.domainStopped(ev.Domain, code, reason)
}

// exitOf maps why a domain stopped to a container exit.
func exitOf(why virt.StopReason) (int32, string) {
	switch why {
	case virt.StopShutdown:
		return ExitClean, "Completed"
	case virt.StopCrashed, virt.StopFailed:
		return ExitCrashed, "Crashed"
	case virt.StopMigrated:
		return ExitClean, ReasonMigrated
	default:
		return ExitKilled, "Killed"
	}
}

// domainStopped records the exit of a running VM that stopped on its own
// (guest power-off, crash, qemu killed), not of one the user powered off
// through the VM API (see stopIsNoExit).
func (r *Runtime) domainStopped(domain string, code int32, reason string) {
	r.stopped(domain, code, reason, "domain "+domain+" stopped")
}

// stopped records the exit of a running VM with its message.
func (r *Runtime) stopped(domain string, code int32, reason, msg string) {
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return
	}
	defer unlock()
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || r.stopIsNoExit(c, reason) {
		return
	}
	if c.AwaitsMigration() { // the qemu of a VM arriving here, gone with its migration
		if err := r.FailTarget(c, "the migration failed: the arriving VM stopped on this node ("+reason+")"); err != nil {
			r.Log.Error("record a failed migration target", "container", c.ID, "err", err)
		}
		return
	}
	if err := r.SaveExit(c, code, reason, msg); err != nil {
		r.Log.Error("record VM exit", "container", c.ID, "err", err)
	}
	r.Log.Info("VM exited", "container", c.ID, "exit_code", code, "reason", reason)
}

// resync marks VMs the store thinks are running but libvirt has stopped
// (or lost) as exited, and records as running a VM whose start crimux did
// not record. One list of libvirt's domains answers for every record: at a
// restart with hundreds of VM records, a lookup and a state per record
// were as many calls on the connection the first CRI calls wait on. A
// list that fails leaves every record as it is (their VMs' state unknown).
func (r *Runtime) resync(l virt.Libvirt) {
	recs, err := r.Store.LiveContainers()
	if err != nil || !anyStarted(recs) {
		return
	}
	doms, err := l.ListAll()
	if err != nil {
		r.Log.Warn("resync: list libvirt's domains; VM records left as they are", "err", err)
		return
	}
	boot := r.bootTime()
	listed := make(map[string]virt.Domain, len(doms))
	for _, d := range doms {
		listed[d.Name] = d
	}
	for _, c := range recs {
		d, defined := listed[c.Domain]
		switch {
		case c.State == runtimeapi.ContainerState_CONTAINER_CREATED:
			if defined && !d.Inactive() {
				r.startedUnrecorded(l, c)
			}
		case c.State != runtimeapi.ContainerState_CONTAINER_RUNNING:
		case c.AwaitsMigration(): // no qemu until its VM arrives
		case defined && !d.Inactive():
		case startedBefore(c, boot):
			r.stopped(c.Domain, ExitNodeRebooted, ReasonNodeRebooted, nodeRebootMessage(c.Domain, boot))
		case !defined:
			r.domainStopped(c.Domain, ExitKilled, "DomainGone")
		case r.ShutoffMigrated(l, d):
			r.MigratedAway(c.ID, "this VM moved to another node by live migration while crimux was down")
		default:
			r.domainStopped(c.Domain, ExitClean, "Completed")
		}
	}
}

// anyStarted: some record is created or running, so libvirt's list can
// tell it something.
func anyStarted(recs []*store.Container) bool {
	for _, c := range recs {
		if c.State == runtimeapi.ContainerState_CONTAINER_CREATED || c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return true
		}
	}
	return false
}

// startedUnrecorded records as running a VM whose domain runs although
// its record says created: crimux was killed between DomainCreate and
// writing the record. Under the pod's lock, the record and the domain's
// state are read again: a start that failed after the list (its domain
// destroyed again) is not recorded as running.
func (r *Runtime) startedUnrecorded(l virt.Libvirt, c *store.Container) {
	defer r.Locks.Lock(c.SandboxID)()
	c, err := r.Store.Container(c.ID)
	if err != nil || c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		return
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return
	}
	if off, err := IsShutoff(l, dom); err != nil || off {
		return
	}
	if c.Clone != nil { // restored, perhaps not made itself yet: never run as its template
		r.cloneCutShort(l, dom, c)
		return
	}
	c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now().UnixNano()
	if err := r.Store.PutContainer(c); err == nil {
		r.Console.Start(c.ID, c.Dir, c.LogPath)
		r.Log.Info("VM found running with its start unrecorded; recorded", "container", c.ID)
	}
}

// cloneCutShort destroys clone c, found running with its start
// unrecorded (crimux stopped between its restore and its identity), and
// makes its next start a boot: its disk has run since the template's.
func (r *Runtime) cloneCutShort(l virt.Libvirt, dom virt.Domain, c *store.Container) {
	if err := l.Destroy(dom); err != nil {
		r.Log.Warn("a clone restored before crimux stopped not destroyed", "container", c.ID, "err", err)
		return
	}
	c.Clone = nil
	if err := r.Store.PutContainer(c); err != nil {
		r.Log.Error("record a clone cut short", "container", c.ID, "err", err)
		return
	}
	r.Log.Warn("a clone restored before crimux stopped was destroyed (perhaps not made itself yet): it boots at its next start", "container", c.ID)
}
