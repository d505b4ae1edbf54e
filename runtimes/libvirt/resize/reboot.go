package resize

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// How long, and how often, crimux asks a rebooted guest's agent to take
// its resized size again (under TCG the Debian guest's agent answers
// ~50 s after a reset).
var (
	afterRebootWait = 5 * time.Minute
	afterRebootPoll = 2 * time.Second
)

// errNotYet: the rebooted guest is not at its size yet; ask again.
var errNotYet = errors.New("not yet")

// AfterReboot runs on domain's reboot events (core.Runtime.AfterReboot):
// a guest that rebooted comes back with every plugged vCPU online and the
// virtio-mem memory it plugs again offline (Debian's kernel onlines no
// hot-added memory by itself). A VM that was resized
// live — vCPUs left plugged beyond its size by a shrink that could not
// unplug them (store.Container.PluggedVCPUs), or RAM above what it booted
// with — is brought back to its size through its guest agent once that
// answers, as the resize did (the pod's cgroup bounds it all along).
func (r *Resizer) AfterReboot(ctx context.Context, l virt.Libvirt, domain string) {
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	if c, err := r.Store.Container(id); err != nil || !resizedLive(c) {
		return
	}
	go r.resizeRebootedGuest(ctx, l, domain, id)
}

func resizedLive(c *store.Container) bool {
	return c.PluggedVCPUs > c.VCPUs || (c.BootMemoryMiB > 0 && c.MemoryMiB > c.BootMemoryMiB)
}

func (r *Resizer) resizeRebootedGuest(ctx context.Context, l virt.Libvirt, domain, id string) {
	deadline := time.NewTimer(afterRebootWait)
	defer deadline.Stop()
	tick := time.NewTicker(afterRebootPoll)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			r.Log.Warn("rebooted guest not brought back to its resized size: its agent did not answer", "container", id, "err", last)
			return
		case <-tick.C:
		}
		c, err := r.Store.Container(id)
		if err != nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !resizedLive(c) {
			return
		}
		dom, err := l.Lookup(domain)
		if err != nil {
			return
		}
		if last = guestToSize(l, dom, c); last == nil {
			r.Log.Info("rebooted guest brought back to its resized size", "container", id, "vcpus", c.VCPUs, "memory_mib", c.MemoryMiB)
			return
		}
	}
}

// guestToSize takes the guest's vCPUs beyond c.VCPUs offline and, once it
// has plugged its virtio-mem memory again, onlines that.
func guestToSize(l virt.Libvirt, dom virt.Domain, c *store.Container) error {
	send := agent.SendTo(l, dom)
	if c.PluggedVCPUs > c.VCPUs {
		online, err := agent.SetOnlineVCPUs(send, int(c.VCPUs))
		if err != nil {
			return err
		}
		if online != int(c.VCPUs) {
			return fmt.Errorf("%d vCPUs online, want %d: %w", online, c.VCPUs, errNotYet)
		}
	}
	if c.BootMemoryMiB == 0 || c.MemoryMiB <= c.BootMemoryMiB {
		return nil
	}
	plug, ok, err := l.PluggedMemory(dom)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case plug.CurrentMiB < plug.RequestedMiB:
		return fmt.Errorf("the guest has plugged %d of %d MiB: %w", plug.CurrentMiB, plug.RequestedMiB, errNotYet)
	}
	_, err = agent.OnlineMemory(send)
	return err
}
