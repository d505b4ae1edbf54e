package cgroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// On a host where systemd runs on the unified hierarchy, a pod whose
// cgroup parent is a slice (kubelet's systemd driver) belongs to systemd:
// systemd owns the slices' cgroup.subtree_control and rewrites it from its
// units on every daemon-reload, SetUnitProperties or unit start. A plain
// directory under a pod slice is no unit, so the first daemon-reload takes
// cpu and memory out of the slice's subtree_control and the VM's cpu.max
// and memory.max vanish (seen on the test node, test/node). There the VM's
// leaf is a transient scope, <Name>.scope in the pod slice, made the way
// runc makes a container's with the systemd driver: systemd moves the
// qemu wrapper into it and applies the limits from the unit's properties,
// and removes it once its last process exits. A scope needs a process, so
// Create only validates; Place makes it.

// scopeTimeout bounds one exchange with systemd.
const scopeTimeout = 30 * time.Second

// scoped tells whether s's leaf is a systemd scope on this layout.
func (l Layout) scoped(s Spec) bool {
	return l.Systemd && podSlice(s.Parent) != ""
}

// podSlice is the systemd slice unit a CRI cgroup_parent names, or "" if
// it names none. Both of the systemd driver's forms name one: the unit
// ("kubepods-burstable-pod1.slice", as crictl users and containerd write
// it) and the path systemd gives it ("/kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod1.slice", what kubelet's systemd driver sends).
func podSlice(parent string) string {
	if !strings.HasSuffix(parent, ".slice") {
		return ""
	}
	if !strings.Contains(parent, "/") {
		return parent
	}
	unit := path.Base(parent)
	if expanded, err := expandSlice(unit); err != nil || expanded != parent {
		return ""
	}
	return unit
}

// scopeName is the unit name of s's leaf.
func scopeName(s Spec) string { return s.Name + ".scope" }

// leafPath is s's leaf relative to the roots: the leaf directory, or on
// the systemd driver its scope's.
func (l Layout) leafPath(s Spec) (string, error) {
	_, leaf, err := s.Paths()
	if err != nil {
		return "", err
	}
	if l.scoped(s) {
		return leaf + ".scope", nil
	}
	return leaf, nil
}

// LeafPath is s's leaf relative to the roots of every hierarchy of l (on
// the systemd driver, its scope: "<parent>/<Name>.scope").
func (l Layout) LeafPath(s Spec) (string, error) { return l.leafPath(s) }

// ScopeProperties are the unit properties that give a scope the limits of
// s: what systemd writes into cpu.weight, cpu.max and memory.max. Unset
// limits are "infinity", so an update lifts them. The quota per second is
// rounded up to whole 10 ms, as runc does (systemd before v242 kept only
// that much).
func ScopeProperties(s Spec) []sddbus.Property {
	props := []sddbus.Property{
		{Name: "CPUAccounting", Value: godbus.MakeVariant(true)},
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: godbus.MakeVariant(true)},
	}
	if s.CPUShares > 0 {
		props = append(props, sddbus.Property{Name: "CPUWeight", Value: godbus.MakeVariant(weightOf(s.CPUShares))})
	}
	period := uint64(100000)
	if s.CPUPeriod > 0 {
		period = uint64(s.CPUPeriod)
		props = append(props, sddbus.Property{Name: "CPUQuotaPeriodUSec", Value: godbus.MakeVariant(period)})
	}
	perSec := uint64(math.MaxUint64)
	if s.CPUQuota > 0 {
		perSec = uint64(s.CPUQuota) * 1000000 / period
		if perSec%10000 != 0 {
			perSec = (perSec/10000 + 1) * 10000
		}
	}
	props = append(props, sddbus.Property{Name: "CPUQuotaPerSecUSec", Value: godbus.MakeVariant(perSec)})
	memMax := uint64(math.MaxUint64)
	if s.MemoryLimit > 0 {
		memMax = uint64(s.MemoryLimit)
	}
	return append(props, sddbus.Property{Name: "MemoryMax", Value: godbus.MakeVariant(memMax)})
}

func weightOf(shares uint64) uint64 { return cgroup2.ConvertCPUSharesToCgroupV2Value(shares) }

// placeInScope starts s's scope with pid in it, in the pod's slice, or,
// where the scope runs already (another process of the VM: virtiofsd),
// moves pid into it and applies the limits again. A scope that is still
// known but no longer active (the previous qemu of the VM just exited: a
// snapshot revert, a managed-save restore) is waited out.
func (l Layout) placeInScope(s Spec, pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), scopeTimeout)
	defer cancel()
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	name := scopeName(s)
	props := append([]sddbus.Property{
		sddbus.PropDescription("crimux VM " + s.Name),
		sddbus.PropSlice(podSlice(s.Parent)),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		sddbus.PropPids(uint32(pid)),
	}, ScopeProperties(s)...)
	pin, err := scopeCpusetProperties(s, false)
	if err != nil {
		return err
	}
	props = append(props, pin...)
	for {
		done := make(chan string, 1)
		_, err = conn.StartTransientUnitContext(ctx, name, "fail", props, done)
		if err == nil {
			return waitJob(ctx, done, "start "+name+" in "+s.Parent)
		}
		var dbusErr godbus.Error
		if !errors.As(err, &dbusErr) || dbusErr.Name != "org.freedesktop.systemd1.UnitExists" {
			return fmt.Errorf("start %s in %s: %w", name, s.Parent, err)
		}
		attachErr := conn.AttachProcessesToUnit(ctx, name, "/", []uint32{uint32(pid)})
		if attachErr == nil {
			return l.updateScope(s)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("move pid %d into %s: %w", pid, name, attachErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitJob waits for a systemd job's result.
func waitJob(ctx context.Context, done <-chan string, what string) error {
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("%s: job %s", what, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// updateScope sets s's limits on its running scope; a scope that is gone
// (no qemu runs) takes them when it is next made.
func (l Layout) updateScope(s Spec) error {
	ctx, cancel := context.WithTimeout(context.Background(), scopeTimeout)
	defer cancel()
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	pin, err := scopeCpusetProperties(s, l.scopePinned(s))
	if err != nil {
		return err
	}
	err = conn.SetUnitPropertiesContext(ctx, scopeName(s), true, append(ScopeProperties(s), pin...)...)
	var dbusErr godbus.Error
	if errors.As(err, &dbusErr) && dbusErr.Name == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set the limits of %s: %w", scopeName(s), err)
	}
	return nil
}

// stopEmptyScope stops s's scope if it holds no process (systemd removes
// an empty scope by itself, but not always at once); a scope with
// processes is left for rmdirWait to report.
func (l Layout) stopEmptyScope(s Spec, dir string) {
	procs, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil || strings.TrimSpace(string(procs)) != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scopeTimeout)
	defer cancel()
	conn, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, scopeName(s), "replace", done); err == nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}
