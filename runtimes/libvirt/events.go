package libvirt

import (
	"context"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
)

// eventHub fans CRI container events out to GetContainerEvents streams.
type eventHub struct {
	mu   sync.Mutex
	subs map[chan *runtimeapi.ContainerEventResponse]struct{}
}

func newEventHub() *eventHub {
	return &eventHub{subs: map[chan *runtimeapi.ContainerEventResponse]struct{}{}}
}

func (h *eventHub) subscribe() (chan *runtimeapi.ContainerEventResponse, func()) {
	ch := make(chan *runtimeapi.ContainerEventResponse, 64)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// publish never blocks: a slow subscriber loses events (kubelet's relist
// covers them), it does not stall the runtime.
func (h *eventHub) publish(ev *runtimeapi.ContainerEventResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// GetContainerEvents streams the VM runtime's container events.
func (r *Runtime) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ch, cancel := r.events.subscribe()
	defer cancel()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// onConnect runs on every libvirtd (re)connect: it follows lifecycle and
// reboot events (libvirt's, not polling) for as long as the connection
// lives and catches up with what happened while crimux was not listening.
func (r *Runtime) onConnect(ctx context.Context, l *golibvirt.Libvirt) {
	lifecycle, err := l.LifecycleEvents(ctx)
	if err != nil {
		r.log.Error("subscribe to libvirt lifecycle events", "err", err)
	}
	reboots, err := l.SubscribeEvents(ctx, golibvirt.DomainEventIDReboot, golibvirt.OptDomain{})
	if err != nil {
		r.log.Error("subscribe to libvirt reboot events", "err", err)
	} else {
		defer r.reboots.follow(l)()
	}
	r.resync(l)
	first := r.firstConnect.CompareAndSwap(false, true)
	r.CollectGarbage(ctx, first)
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
		case ev, ok := <-reboots:
			if !ok {
				reboots = nil
				continue
			}
			if msg, isReboot := ev.(*golibvirt.DomainEventCallbackRebootMsg); isReboot {
				r.reboots.fire(msg.Msg.Dom.Name)
			}
		}
	}
}

// onLifecycle records the exit of a crimux VM that stopped.
func (r *Runtime) onLifecycle(ev golibvirt.DomainEventLifecycleMsg) {
	if golibvirt.DomainEventType(ev.Event) != golibvirt.DomainEventStopped || !strings.HasPrefix(ev.Dom.Name, vm.DomainName("")) {
		return
	}
	code, reason := exitOf(golibvirt.DomainEventStoppedDetailType(ev.Detail))
	r.domainStopped(ev.Dom.Name, code, reason)
}

// exitOf maps why a domain stopped to a container exit.
func exitOf(detail golibvirt.DomainEventStoppedDetailType) (int32, string) {
	switch detail {
	case golibvirt.DomainEventStoppedShutdown:
		return exitClean, "Completed"
	case golibvirt.DomainEventStoppedCrashed, golibvirt.DomainEventStoppedFailed:
		return exitCrashed, "Crashed"
	default:
		return exitKilled, "Killed"
	}
}

// domainStopped records the exit of a running VM that stopped on its own
// (guest power-off, crash, qemu killed), not of one the user powered off
// through the VM API (see stopIsNoExit).
func (r *Runtime) domainStopped(domain string, code int32, reason string) {
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	c, unlock, err := r.lockContainer(id)
	if err != nil {
		return
	}
	defer unlock()
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || r.stopIsNoExit(c, reason) {
		return
	}
	r.markExited(c, code, reason, "domain "+domain+" stopped")
	if err := r.store.putContainer(c); err != nil {
		r.log.Error("record VM exit", "container", c.ID, "err", err)
	}
	r.log.Info("VM exited", "container", c.ID, "exit_code", code, "reason", reason)
}

// resync marks VMs the store thinks are running but libvirt has stopped
// (or lost) as exited.
func (r *Runtime) resync(l *golibvirt.Libvirt) {
	recs, err := r.store.liveContainers()
	if err != nil {
		return
	}
	for _, c := range recs {
		if c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			r.startedUnrecorded(l, c)
			continue
		}
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		dom, err := l.DomainLookupByName(c.Domain)
		if golibvirt.IsNotFound(err) {
			r.domainStopped(c.Domain, exitKilled, "DomainGone")
			continue
		}
		if off, err := isShutoff(l, dom); err == nil && off {
			r.domainStopped(c.Domain, exitClean, "Completed")
		}
	}
}

// startedUnrecorded records as running a VM whose domain runs although
// its record says created: crimux was killed between DomainCreate and
// writing the record.
func (r *Runtime) startedUnrecorded(l *golibvirt.Libvirt, c *containerRecord) {
	dom, err := l.DomainLookupByName(c.Domain)
	if err != nil {
		return
	}
	if off, err := isShutoff(l, dom); err != nil || off {
		return
	}
	defer r.locks.lock(c.SandboxID)()
	c, err = r.store.container(c.ID)
	if err != nil || c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		return
	}
	c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now().UnixNano()
	if err := r.store.putContainer(c); err == nil {
		r.console.start(c)
		r.log.Info("VM found running with its start unrecorded; recorded", "container", c.ID)
	}
}
