package resize

import (
	"context"
	"fmt"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// defaultPlugWait bounds how long a resize waits for the guest to plug or
// unplug the memory asked of it (under TCG 256 MiB took under 3 s).
const defaultPlugWait = 20 * time.Second

// unplugSlackMiB is how much a shrink may leave plugged (blocks the guest
// cannot free at once) and still succeed.
const unplugSlackMiB = 32

// resizer is one resize of one domain.
type resizer struct {
	r    *Resizer
	l    virt.Libvirt
	dom  virt.Domain
	c    *store.Container
	live bool
}

// resizeDomain changes the domain's vCPUs, then its plugged memory; a
// memory change that fails puts the vCPUs back.
func (r *Resizer) resizeDomain(ctx context.Context, c, next *store.Container, live bool) error {
	l, err := r.Conn.Get()
	if err != nil {
		return err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return fmt.Errorf("domain %s: %w", c.Domain, err)
	}
	z := resizer{r: r, l: l, dom: dom, c: c, live: live}
	if next.VCPUs != c.VCPUs {
		leftPlugged, err := z.setVCPUs(c.VCPUs, next.VCPUs)
		if err != nil {
			return err
		}
		next.PluggedVCPUs = pluggedAfter(c, next.VCPUs, leftPlugged)
	}
	if next.MemoryMiB != c.MemoryMiB {
		if err := z.setMemory(ctx, c.MemoryMiB, next.MemoryMiB); err != nil {
			if next.VCPUs != c.VCPUs {
				if _, back := z.setVCPUs(next.VCPUs, c.VCPUs); back != nil {
					r.Log.Warn("vCPUs not put back after a failed memory resize", "container", c.ID, "err", back)
				}
			}
			return err
		}
	}
	r.Log.Info("VM resized", "container", c.ID, "live", live, "vcpus", next.VCPUs, "memory_mib", next.MemoryMiB,
		"was_vcpus", c.VCPUs, "was_memory_mib", c.MemoryMiB)
	return nil
}

// setVCPUs plugs or unplugs vCPUs. The guest agent brings new ones
// online, and takes the ones going away offline first: nproc and the
// guest's scheduler follow at once, and an unplug then takes no guest
// round trip. Without an agent the guest must online them itself.
// leftPlugged: a shrink left the vCPUs plugged (unplugVCPUs).
func (z resizer) setVCPUs(from, to uint) (leftPlugged bool, err error) {
	if z.live && to < from {
		z.online(to)
		return z.unplugVCPUs(from, to)
	}
	if err := z.l.SetVCPUs(z.dom, to, z.live); err != nil {
		return false, fmt.Errorf("VM %s: %d vCPUs -> %d: %w", z.c.ID, from, to, err)
	}
	if z.live && to > from {
		z.online(to)
	}
	return false, nil
}

// unplugVCPUs unplugs the vCPUs the guest has just taken offline and
// sets the definition's count. Under TCG they stay plugged (offline in
// the guest, bounded by the pod's CPU quota): qemu 7.2 never finishes a
// TCG vCPU unplug — the guest ejects the CPU, but qemu reports only its
// local APIC deleted, so libvirt times out and keeps counting the vCPU
// (measured; later plugs were then no-ops). With KVM an unplug that does
// not complete is left the same way. A later grow onlines them again
// (libvirt still counts them plugged); after a guest reboot crimux takes
// them offline again (AfterReboot).
func (z resizer) unplugVCPUs(from, to uint) (leftPlugged bool, err error) {
	if z.c.Accel != vm.AccelTCG {
		err := z.l.SetVCPUs(z.dom, to, true)
		if err == nil {
			return false, nil
		}
		z.r.Log.Warn("vCPU unplug did not complete; the vCPUs stay plugged, offline in the guest", "container", z.c.ID, "from", from, "to", to, "err", err)
	}
	if err := z.l.SetVCPUs(z.dom, to, false); err != nil {
		return false, fmt.Errorf("VM %s: %d vCPUs -> %d in its definition: %w", z.c.ID, from, to, err)
	}
	return true, nil
}

// pluggedAfter is the record's PluggedVCPUs once c has to vCPUs: what
// stays plugged beyond them, 0 when nothing does.
func pluggedAfter(c *store.Container, to uint, leftPlugged bool) uint {
	plugged := max(c.PluggedVCPUs, c.VCPUs)
	if !leftPlugged && to < c.VCPUs { // unplugged down to to
		return 0
	}
	if plugged <= to {
		return 0
	}
	return plugged
}

// online brings the guest's first n vCPUs online (and the others
// offline) through its agent, waiting a little for plugged ones to show
// in the guest (ACPI hot plug is not instant, under TCG least of all).
func (z resizer) online(n uint) {
	deadline := time.Now().Add(z.wait())
	for {
		got, err := agent.SetOnlineVCPUs(agent.SendTo(z.l, z.dom), int(n))
		switch {
		case err != nil:
			z.r.Log.Warn("guest vCPUs not onlined through the guest agent; the guest must do it itself", "container", z.c.ID, "vcpus", n, "err", err)
			return
		case got == int(n) || time.Now().After(deadline):
			if got != int(n) {
				z.r.Log.Warn("guest shows fewer vCPUs online than plugged", "container", z.c.ID, "vcpus", n, "online", got)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setMemory asks the guest's virtio-mem device for to MiB above its boot
// RAM and, live, waits until the guest has plugged (or unplugged) it,
// onlining what it plugged. A guest that does not follow is asked for
// the old size again.
func (z resizer) setMemory(ctx context.Context, from, to uint64) error {
	boot, room := bootMemory(z.c), z.c.MaxMemoryMiB-bootMemory(z.c)
	room -= room % vm.MemoryBlockMiB
	if z.c.MaxMemoryMiB <= boot || room == 0 {
		return errdefs.Invalid("linux.memory_limit_in_bytes", "VM %s was created without room to grow its RAM", z.c.ID)
	}
	if err := z.request(to - boot); err != nil {
		return err
	}
	if !z.live {
		return nil
	}
	// A shrink is done once at most a few blocks the guest cannot free
	// yet are left (qemu's overhead allowance in the cgroup covers them).
	done := func(current uint64) bool { return current == to-boot }
	if to < from {
		done = func(current uint64) bool { return current <= to-boot+unplugSlackMiB }
	}
	plug, err := z.waitPlugged(ctx, done)
	if err == nil {
		if to > from {
			z.onlineMemory()
		}
		return nil
	}
	if back := z.request(from - boot); back != nil {
		z.r.Log.Warn("virtio-mem request not put back after a failed resize", "container", z.c.ID, "err", back)
	} else if to < from {
		z.onlineMemory() // what was unplugged and plugged again comes back offline
	}
	return fmt.Errorf("VM %s: %d MiB of RAM -> %d: the guest has %d MiB of the %d MiB asked plugged after %v (%s): %w",
		z.c.ID, from, to, plug.CurrentMiB, to-boot, z.wait(), memoryHint(to > from), errdefs.ErrFailedPrecondition)
}

func memoryHint(grow bool) string {
	if grow {
		return "its kernel needs the virtio_mem driver, Linux 5.8 or later"
	}
	return "memory in use cannot be unplugged"
}

func (z resizer) request(requested uint64) error {
	if err := z.l.RequestMemory(z.dom, requested, z.live); err != nil {
		return fmt.Errorf("VM %s: virtio-mem request of %d MiB: %w", z.c.ID, requested, err)
	}
	return nil
}

// waitPlugged waits until what the guest has plugged is done.
func (z resizer) waitPlugged(ctx context.Context, done func(current uint64) bool) (virt.MemoryPlug, error) {
	ctx, cancel := context.WithTimeout(ctx, z.wait())
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		plug, ok, err := z.l.PluggedMemory(z.dom)
		switch {
		case err != nil:
			return plug, err
		case !ok:
			return plug, fmt.Errorf("domain %s has no virtio-mem device", z.c.Domain)
		case done(plug.CurrentMiB):
			return plug, nil
		}
		select {
		case <-ctx.Done():
			return plug, ctx.Err()
		case <-tick.C:
		}
	}
}

func (z resizer) wait() time.Duration {
	if z.r.PlugWait > 0 {
		return z.r.PlugWait
	}
	return defaultPlugWait
}

func (z resizer) onlineMemory() {
	if _, err := agent.OnlineMemory(agent.SendTo(z.l, z.dom)); err != nil {
		z.r.Log.Warn("guest memory blocks not onlined through the guest agent; the guest must do it itself", "container", z.c.ID, "err", err)
	}
}
