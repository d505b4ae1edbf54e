package resize

import (
	"fmt"
	"log/slog"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
)

// MemoryRooms tells the memory limit of a pod's cgroup (core.Cgroups).
type MemoryRooms interface {
	MemoryRoom(parent string) (limit int64, limited bool, err error)
}

// minFittedMiB is the smallest guest FitMemory shrinks a VM to: the
// Debian cloud kernel does not boot in 64 MiB.
const minFittedMiB = 128

// FitMemory makes a new VM of res fit in the room its pod's cgroup
// (parent, read through cg) leaves. The guest's RAM and qemu's own
// memory (libvirt.memory_overhead_mib, opts.MemoryOverheadMiB) share
// the pod's memory limit; kubelet sets that limit to the container's
// memory limit plus the RuntimeClass overhead, if any. With the overhead
// (RuntimeClass vm) the VM fits as asked. Without it (a pod routed by
// annotation, a RuntimeClass without overhead) the guest would get the
// whole limit and qemu would be OOM-killed in the pod, again and again:
// the guest gets the limit minus qemu's overhead instead, when that is at
// least minFittedMiB; otherwise the VM is refused (FailedPrecondition),
// naming the numbers and the fix.
func FitMemory(cg MemoryRooms, opts *core.Options, log *slog.Logger, parent string, res vm.Resources) (vm.Resources, error) {
	if parent == "" {
		return res, nil
	}
	room, limited, err := cg.MemoryRoom(parent)
	if err != nil {
		log.Warn("cannot read the pod's memory limit; the VM is sized as asked", "cgroup_parent", parent, "err", err)
		return res, nil
	}
	overhead := uint64(max(opts.MemoryOverheadMiB, 0))
	roomMiB := uint64(room) >> 20
	if !limited || res.MemoryMiB+overhead <= roomMiB {
		return res, nil
	}
	if res.HugePages.PageKiB != 0 {
		return fitHugePages(res, roomMiB, overhead)
	}
	if roomMiB >= overhead+minFittedMiB {
		log.Info("VM's RAM sized to fit its pod (no pod overhead for qemu)", "asked_mib", res.MemoryMiB,
			"ram_mib", roomMiB-overhead, "pod_limit_mib", roomMiB, "qemu_overhead_mib", overhead)
		res.MemoryMiB = roomMiB - overhead
		return res, nil
	}
	return res, fmt.Errorf("the pod's cgroup allows %d MiB of memory, and a VM of %d MiB of RAM needs %d MiB more for qemu "+
		"(libvirt.memory_overhead_mib): run the pod with RuntimeClass vm, whose overhead.podFixed.memory gives qemu that room, "+
		"or raise its memory limit to at least %d MiB (the guest then gets the limit less %d MiB): %w",
		roomMiB, res.MemoryMiB, overhead, overhead+minFittedMiB, overhead, errdefs.ErrFailedPrecondition)
}

// fitHugePages checks a VM whose RAM is huge pages (not charged to the
// pod's memory limit): the limit must hold qemu's own memory.
func fitHugePages(res vm.Resources, roomMiB, overhead uint64) (vm.Resources, error) {
	if overhead <= roomMiB {
		return res, nil
	}
	return res, fmt.Errorf("the pod's cgroup allows %d MiB of memory, and qemu needs %d MiB besides the guest's huge pages "+
		"(libvirt.memory_overhead_mib): run the pod with RuntimeClass vm, or raise its memory limit to at least %d MiB: %w",
		roomMiB, overhead, overhead, errdefs.ErrFailedPrecondition)
}
