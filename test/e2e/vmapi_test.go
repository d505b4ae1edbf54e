package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The VM API (crimux.vm.v1.VMService) end to end, driven with crimuxctl
// against real libvirtd + qemu (TCG) and the test VM image, whose /init
// prints CRIMUX-VM-BOOTED at each boot, CRIMUX-DISK: <marker> once its
// disk is mounted at /mnt, CRIMUX-UPTIME: <secs> every 2 s, powers off on
// the ACPI power button and runs a shell on the serial console. Through
// every operation the VM stays the same CRI container, running.

// vmJSON is what crimuxctl -o json prints of a VM (the .proto's names).
type vmJSON struct {
	PodSandboxID   string `json:"pod_sandbox_id"`
	ContainerID    string `json:"container_id"`
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	ContainerState string `json:"container_state"`
	PowerState     string `json:"power_state"`
	Domain         string `json:"domain"`
	DomainState    string `json:"domain_state"`
	HasManagedSave bool   `json:"has_managed_save"`
	Accelerator    string `json:"accelerator"`
	Resources      struct {
		Vcpus     int    `json:"vcpus"`
		MemoryMib string `json:"memory_mib"`
	} `json:"resources"`
	Snapshots []snapshotJSON `json:"snapshots"`
}

type snapshotJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	VMState     string `json:"vm_state"`
	HasMemory   bool   `json:"has_memory"`
	Current     bool   `json:"current"`
}

func (v *testVM) get(t *testing.T, ctl string) vmJSON {
	t.Helper()
	var resp struct {
		VM vmJSON `json:"vm"`
	}
	mustJSON(t, v.c.ctlOK(t, ctl, "-o", "json", "vm", "get", v.ctrID), &resp)
	return resp.VM
}

// power sets a power state and checks the answer.
func (v *testVM) power(t *testing.T, ctl, state string) (forced bool) {
	t.Helper()
	var resp struct {
		State  string `json:"state"`
		Forced bool   `json:"forced"`
	}
	start := time.Now()
	mustJSON(t, v.c.ctlOK(t, ctl, "vm", "power", v.ctrID, state, "--grace-period", "30s", "-o", "json"), &resp)
	if want := "POWER_STATE_" + strings.ToUpper(state); resp.State != want {
		t.Fatalf("power %s answered state %s", state, resp.State)
	}
	t.Logf("power %s: %s (forced %v)", state, time.Since(start).Round(time.Millisecond), resp.Forced)
	return resp.Forced
}

// TestVMAPIReboot: a soft reboot (the guest restarts itself on the ACPI
// power button) and a hard one each boot the guest again; the container
// is the same and running throughout.
func TestVMAPIReboot(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "vmapi-reboot")
	stopWatch := v.watchPS(t)
	if n := v.count(vmMarker); n != 1 {
		t.Fatalf("%d boot markers before the reboot, want 1", n)
	}

	var soft struct {
		Method       string `json:"method"`
		SoftTimedOut bool   `json:"soft_timed_out"`
	}
	start := time.Now()
	mustJSON(t, c.ctlOK(t, ctl, "vm", "reboot", v.ctrID, "--grace-period", "30s", "-o", "json"), &soft)
	if soft.Method != "REBOOT_METHOD_SOFT" || soft.SoftTimedOut {
		t.Fatalf("reboot answered %+v, want a soft reboot (the guest runs acpid)", soft)
	}
	t.Logf("soft reboot answered in %s", time.Since(start).Round(time.Millisecond))
	testutil.Eventually(t, bootTimeout, "a second boot on the console", func() error {
		if n := v.count(vmMarker); n != 2 {
			return fmt.Errorf("%d boot markers", n)
		}
		return nil
	})
	v.waitConsole(t, strings.LastIndex(v.consoleLog(), vmMarker), bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	v.requireRunningAs(t, "")

	out := c.ctlOK(t, ctl, "vm", "reboot", v.ctrID, "--hard")
	if !strings.Contains(out, "reset (hard)") {
		t.Fatalf("hard reboot printed %q", out)
	}
	testutil.Eventually(t, bootTimeout, "a third boot on the console", func() error {
		if n := v.count(vmMarker); n != 3 {
			return fmt.Errorf("%d boot markers", n)
		}
		return nil
	})
	testutil.Eventually(t, within(t, 10*time.Second), "three boots in crictl logs", func() error {
		if n := strings.Count(c.crictl("logs", v.ctrID), vmMarker); n != 3 {
			return fmt.Errorf("%d boot markers in crictl logs", n)
		}
		return nil
	})
	stopWatch()
	v.requireRunningAs(t, "")
	if ids := c.crictl("ps", "-q", "--pod", v.podID); ids != v.ctrID {
		t.Fatalf("crictl ps lists %q for the pod, want only %s", ids, v.ctrID)
	}
}

// TestVMAPISnapshot: write a marker to the VM's disk, snapshot (with
// memory), change the marker, restore: the first marker is back; list and
// get show the snapshot, names are unique, delete removes it, and nothing
// of it is left once the VM is removed.
func TestVMAPISnapshot(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "vmapi-snapshot")
	stopWatch := v.watchPS(t)
	markerA, markerB := "snap-a-"+randomToken(), "snap-b-"+randomToken()

	v.guestRun(t, fmt.Sprintf("echo %s > /mnt/marker && sync", markerA))
	if got := v.guestOutput(t, "cat /mnt/marker"); got != markerA {
		t.Fatalf("guest reads %q from its disk, want %q", got, markerA)
	}
	var created struct {
		Snapshot snapshotJSON `json:"snapshot"`
	}
	start := time.Now()
	mustJSON(t, c.ctlOK(t, ctl, "-o", "json", "vm", "snapshot", "create", v.ctrID, "before-change", "--description", "marker A"), &created)
	t.Logf("snapshot of a running VM took %s", time.Since(start).Round(time.Millisecond))
	if s := created.Snapshot; s.Name != "before-change" || !s.HasMemory || s.VMState != "running" || s.Description != "marker A" {
		t.Fatalf("created %+v, want a running snapshot with memory", s)
	}
	c.ctlFails(t, ctl, "AlreadyExists", []string{`"before-change"`}, "vm", "snapshot", "create", v.ctrID, "before-change")

	v.guestRun(t, fmt.Sprintf("echo %s > /mnt/marker && sync", markerB))
	if got := v.guestOutput(t, "cat /mnt/marker"); got != markerB {
		t.Fatalf("guest reads %q after the change, want %q", got, markerB)
	}
	start = time.Now()
	out := c.ctlOK(t, ctl, "vm", "snapshot", "restore", v.ctrID, "before-change")
	t.Logf("restore took %s: %s", time.Since(start).Round(time.Millisecond), out)
	if !strings.Contains(out, "power state Running") {
		t.Fatalf("restore printed %q, want the VM running", out)
	}
	if got := v.guestOutput(t, "cat /mnt/marker"); got != markerA {
		t.Fatalf("guest reads %q after the restore, want the first marker %q", got, markerA)
	}
	if n := v.count(vmMarker); n != 1 {
		t.Fatalf("%d boots: a restore with memory resumes, it does not boot", n)
	}
	v.requireRunningAs(t, "")
	// The new qemu process got the pod's tap again: the guest answers on
	// its pod IP.
	requirePodIPAnswers(t, c, v.podID, within(t, 10*time.Second))

	var list struct {
		Snapshots []snapshotJSON `json:"snapshots"`
	}
	mustJSON(t, c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID, "-o", "json"), &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0].Name != "before-change" || !list.Snapshots[0].Current {
		t.Fatalf("snapshot list %+v, want before-change, current", list.Snapshots)
	}
	if table := c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID); !strings.Contains(table, "before-change") {
		t.Fatalf("snapshot list table lacks the snapshot:\n%s", table)
	}
	if got := v.get(t, ctl); len(got.Snapshots) != 1 || got.Snapshots[0].Name != "before-change" {
		t.Fatalf("vm get shows snapshots %+v", got.Snapshots)
	}

	// Two operations on one VM at once are serialised: both succeed.
	var wg sync.WaitGroup
	results := make([]ctlResult, 2)
	for i, args := range [][]string{
		{"vm", "snapshot", "create", v.ctrID, "concurrent"},
		{"vm", "power", v.ctrID, "paused"},
	} {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = c.ctl(ctl, args...) }()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("concurrent operation %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
	if got := v.get(t, ctl); got.PowerState != "POWER_STATE_PAUSED" || len(got.Snapshots) != 2 {
		t.Fatalf("after concurrent snapshot and pause: power %s, %d snapshots", got.PowerState, len(got.Snapshots))
	}
	v.power(t, ctl, "running")

	c.ctlOK(t, ctl, "vm", "snapshot", "delete", v.ctrID, "before-change")
	c.ctlOK(t, ctl, "vm", "snapshot", "delete", v.ctrID, "concurrent")
	mustJSON(t, c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID, "-o", "json"), &list)
	if len(list.Snapshots) != 0 {
		t.Fatalf("snapshots left after delete: %+v", list.Snapshots)
	}
	c.ctlFails(t, ctl, "NotFound", []string{`"before-change"`}, "vm", "snapshot", "restore", v.ctrID, "before-change")
	c.ctlFails(t, ctl, "NotFound", []string{`"before-change"`}, "vm", "snapshot", "delete", v.ctrID, "before-change")

	// Snapshots go with the VM: metadata in libvirt, data in the overlay.
	c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "left-for-removal")
	stopWatch()
	c.crictl("rmp", "-f", v.podID)
	if _, err := os.Stat(filepath.Join("/var/lib/libvirt/qemu/snapshot", v.domain)); err == nil {
		entries, _ := os.ReadDir(filepath.Join("/var/lib/libvirt/qemu/snapshot", v.domain))
		if len(entries) > 0 {
			t.Fatalf("libvirt kept snapshot metadata of %s after the VM was removed: %v", v.domain, entries)
		}
	}
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, v.domain) {
		t.Fatalf("domain %s still defined after rmp", v.domain)
	}
	assertNoVMFiles(t, c)
}

// TestVMAPIPower: Running -> Paused -> Running (the guest's clock goes
// on), Running -> Hibernate -> Running (a value only in guest memory
// survives), Running -> Shutdown -> Running (boots again from the same
// disk); the container is the same and running throughout, its status
// says the power state, and its stats answer.
func TestVMAPIPower(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "vmapi-power")
	stopWatch := v.watchPS(t)
	defer stopWatch()
	if got := v.get(t, ctl); got.PowerState != "POWER_STATE_RUNNING" || got.DomainState != "running" ||
		got.Accelerator != "tcg" || got.Resources.MemoryMib != "256" || got.ContainerID != v.ctrID {
		t.Fatalf("vm get of a fresh VM: %+v", got)
	}

	t.Run("paused", func(t *testing.T) {
		before := v.lastUptime(t, v.consoleSize())
		v.power(t, ctl, "paused")
		v.requireRunningAs(t, "Paused")
		if got := v.get(t, ctl); got.PowerState != "POWER_STATE_PAUSED" || got.DomainState != "paused" {
			t.Fatalf("vm get while paused: power %s, domain %s", got.PowerState, got.DomainState)
		}
		c.crictl("stats", "--id", v.ctrID)
		mark := v.consoleSize()
		time.Sleep(5 * time.Second)
		if tail := v.consoleLog()[mark:]; strings.Contains(tail, "CRIMUX-UPTIME") {
			t.Fatalf("a paused guest printed: %q", tail)
		}
		v.power(t, ctl, "running")
		v.requireRunningAs(t, "")
		after := v.lastUptime(t, mark)
		t.Logf("guest uptime %.2f s before the pause, %.2f s after it", before, after)
		if after < before {
			t.Fatalf("guest uptime %.2f before the pause, %.2f after: want it to go on, not start again", before, after)
		}
		if n := v.count(vmMarker); n != 1 {
			t.Fatalf("%d boots after pause and resume, want 1", n)
		}
	})

	t.Run("hibernate", func(t *testing.T) {
		held := "held-" + randomToken()
		v.guestRun(t, fmt.Sprintf("echo %s > /tmp/held", held)) // /tmp: tmpfs, memory only
		before := v.lastUptime(t, v.consoleSize())
		v.power(t, ctl, "hibernate")
		v.requireRunningAs(t, "Hibernated")
		got := v.get(t, ctl)
		if got.PowerState != "POWER_STATE_HIBERNATE" || got.DomainState != "shutoff" || !got.HasManagedSave {
			t.Fatalf("vm get while hibernated: %+v", got)
		}
		if st := virsh(t, "domstate", v.domain); st != "shut off" {
			t.Fatalf("virsh domstate of a hibernated VM: %q", st)
		}
		if st := c.stat(t, v.ctrID); st.WorkingSetBytes != 0 || st.UsageBytes != 0 || st.CPUNanos != 0 {
			t.Fatalf("stats of a hibernated VM: %+v, want zeros", st)
		}
		time.Sleep(2 * time.Second) // the stop event has been handled: still running for CRI
		v.requireRunningAs(t, "Hibernated")
		// A crimux restart (its resync of what libvirt runs) keeps it so.
		c.restart()
		time.Sleep(2 * time.Second)
		v.requireRunningAs(t, "Hibernated")

		mark := v.consoleSize()
		v.power(t, ctl, "running")
		v.requireRunningAs(t, "")
		if got := v.guestOutput(t, "cat /tmp/held"); got != held {
			t.Fatalf("guest memory after hibernate: /tmp/held is %q, want %q", got, held)
		}
		if after := v.lastUptime(t, mark); after < before {
			t.Fatalf("guest uptime %.2f after hibernation, %.2f before: it rebooted", after, before)
		}
		if n := v.count(vmMarker); n != 1 {
			t.Fatalf("%d boots after hibernate and resume, want 1", n)
		}
		requirePodIPAnswers(t, c, v.podID, within(t, 10*time.Second))
	})

	t.Run("shutdown", func(t *testing.T) {
		marker := "power-" + randomToken()
		v.guestRun(t, fmt.Sprintf("echo %s > /mnt/marker && sync", marker))
		if forced := v.power(t, ctl, "shutdown"); forced {
			// Seen once on a loaded host: the guest powered off at once,
			// but qemu took longer than the deadline to exit.
			t.Log("shutdown forced the VM off after the deadline")
		}
		v.requireRunningAs(t, "Shutdown")
		if got := v.get(t, ctl); got.PowerState != "POWER_STATE_SHUTDOWN" || got.DomainState != "shutoff" || got.HasManagedSave {
			t.Fatalf("vm get while shut down: %+v", got)
		}
		if !strings.Contains(v.consoleLog(), "CRIMUX-POWEROFF") {
			t.Fatal("the guest was not asked to power off: no CRIMUX-POWEROFF (its ACPI power button handler) on the console")
		}
		// A snapshot of a shut-down VM is of its disk only.
		var created struct {
			Snapshot snapshotJSON `json:"snapshot"`
		}
		mustJSON(t, c.ctlOK(t, ctl, "-o", "json", "vm", "snapshot", "create", v.ctrID, "while-off"), &created)
		if created.Snapshot.HasMemory || created.Snapshot.VMState != "shutoff" {
			t.Fatalf("snapshot of a shut-down VM: %+v, want disk only", created.Snapshot)
		}
		c.ctlOK(t, ctl, "vm", "snapshot", "delete", v.ctrID, "while-off")
		c.restart()
		time.Sleep(2 * time.Second)
		v.requireRunningAs(t, "Shutdown")

		mark := v.consoleSize()
		v.power(t, ctl, "running")
		v.waitConsole(t, mark, bootTimeout, regexp.MustCompile(`(?m)^`+vmMarker))
		if got := v.waitConsole(t, mark, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: (\S+)`)); got != marker {
			t.Fatalf("booted again with disk marker %q, want %q (the same disk)", got, marker)
		}
		if n := v.count(vmMarker); n != 2 {
			t.Fatalf("%d boots after shutdown and power on, want 2", n)
		}
		v.requireRunningAs(t, "")
	})

	var list struct {
		VMs []vmJSON `json:"vms"`
	}
	mustJSON(t, c.ctlOK(t, ctl, "vm", "list", "-o", "json"), &list)
	if len(list.VMs) != 1 || list.VMs[0].ContainerID != v.ctrID || list.VMs[0].PowerState != "POWER_STATE_RUNNING" {
		t.Fatalf("vm list: %+v", list.VMs)
	}
	if table := c.ctlOK(t, ctl, "vm", "list"); !strings.Contains(table, "crimux-e2e/vmapi-power") || !strings.Contains(table, "Running") {
		t.Fatalf("vm list table:\n%s", table)
	}

	// A power-off the guest does on its own, while its power state is
	// Running, still ends the container, as for any VM.
	stopWatch()
	v.typeLine(t, "poweroff -f", 20*time.Second, func() bool {
		state, _ := v.criState(t)
		return state == "CONTAINER_EXITED"
	})
	testutil.Eventually(t, within(t, 30*time.Second), "the container exits after the guest powered off", func() error {
		if state, reason := v.criState(t); state != "CONTAINER_EXITED" || reason != "Completed" {
			return fmt.Errorf("state %s reason %q", state, reason)
		}
		return nil
	})
}

// TestVMAPIBadInput: every bad request fails with the right gRPC code and
// a message naming the problem, and changes nothing.
func TestVMAPIBadInput(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "vmapi-bad")
	c.crictl("pull", busyboxImage)
	cpod := podJSON(t, "vmapi-bad-ctr", "")
	cpodID := c.crictl("runp", cpod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", cpodID) })
	cID := c.crictl("create", cpodID, containerJSON(t, "sleeper", busyboxImage, []string{"sleep", "3600"}), cpod)
	c.crictl("start", cID)

	t.Run("unknown VM", func(t *testing.T) {
		c.ctlFails(t, ctl, "NotFound", []string{`"vm--0123456789abcdef"`}, "vm", "get", "vm--0123456789abcdef")
		c.ctlFails(t, ctl, "NotFound", []string{`"crimux-e2e/ghost"`}, "vm", "power", "crimux-e2e/ghost", "paused")
		c.ctlFails(t, ctl, "NotFound", []string{`"0123456789abcdef"`}, "vm", "reboot", "0123456789abcdef")
		c.ctlFails(t, ctl, "InvalidArgument", []string{"vm.id", `"bad;id"`}, "vm", "get", "bad;id")
	})
	t.Run("unknown snapshot", func(t *testing.T) {
		c.ctlFails(t, ctl, "NotFound", []string{"snapshot_name", `"ghost"`}, "vm", "snapshot", "restore", v.ctrID, "ghost")
		c.ctlFails(t, ctl, "NotFound", []string{"snapshot_name", `"ghost"`}, "vm", "snapshot", "delete", v.ctrID, "ghost")
	})
	t.Run("invalid snapshot names", func(t *testing.T) {
		for name, words := range map[string][]string{
			"../x":                   {"snapshot_name", `"../x"`, `"/"`},
			"":                       {"snapshot_name", "must not be empty"},
			strings.Repeat("x", 300): {"snapshot_name", "300 bytes long"},
			"a..b":                   {"snapshot_name", `".."`},
			"tab\tname":              {"snapshot_name", "control characters"},
		} {
			c.ctlFails(t, ctl, "InvalidArgument", words, "vm", "snapshot", "create", v.ctrID, name)
		}
		c.ctlFails(t, ctl, "InvalidArgument", []string{"snapshot_name"}, "vm", "snapshot", "restore", v.ctrID, "../x")
		var list struct {
			Snapshots []snapshotJSON `json:"snapshots"`
		}
		mustJSON(t, c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID, "-o", "json"), &list)
		if len(list.Snapshots) != 0 {
			t.Fatalf("bad names made snapshots: %+v", list.Snapshots)
		}
	})
	t.Run("container pod", func(t *testing.T) {
		c.ctlFails(t, ctl, "FailedPrecondition", []string{cpodID, "not a VM"}, "vm", "power", cpodID, "paused")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{cID, "not a VM"}, "vm", "reboot", cID)
		c.ctlFails(t, ctl, "FailedPrecondition", []string{`"crimux-e2e/vmapi-bad-ctr"`, "not a VM"}, "vm", "snapshot", "create", "crimux-e2e/vmapi-bad-ctr", "s1")
		var insp struct {
			Status struct{ State string } `json:"status"`
		}
		mustJSON(t, c.crictl("inspect", "-o", "json", cID), &insp)
		if insp.Status.State != "CONTAINER_RUNNING" {
			t.Fatalf("container state after the refused calls: %s", insp.Status.State)
		}
	})
	t.Run("wrong state", func(t *testing.T) {
		v.power(t, ctl, "paused")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{v.ctrID, "reboot needs a running VM"}, "vm", "reboot", v.ctrID)
		v.power(t, ctl, "shutdown")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{v.ctrID, "reboot needs a running VM"}, "vm", "reboot", v.ctrID, "--hard")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{v.ctrID, "no memory to hibernate"}, "vm", "power", v.ctrID, "hibernate")
		v.requireRunningAs(t, "Shutdown")
		v.power(t, ctl, "running")
		v.power(t, ctl, "hibernate")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{"hibernated"}, "vm", "power", v.ctrID, "shutdown")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{"hibernated"}, "vm", "snapshot", "create", v.ctrID, "s1")
		v.power(t, ctl, "running")
		v.requireRunningAs(t, "")
		// A container kubelet stopped is no VM to power.
		c.crictl("stop", v.ctrID)
		c.ctlFails(t, ctl, "FailedPrecondition", []string{"CONTAINER_EXITED"}, "vm", "power", v.ctrID, "running")
		c.ctlFails(t, ctl, "FailedPrecondition", []string{"CONTAINER_EXITED"}, "vm", "reboot", v.ctrID)
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"vm", "power", v.ctrID, "asleep"},
			{"vm", "reboot"},
			{"vm", "snapshot", "create", v.ctrID},
			{"vm", "get", v.ctrID, "-o", "xml"},
		} {
			if r := c.ctl(ctl, args...); r.code != 2 {
				t.Fatalf("crimuxctl %v: exit %d, want 2 (usage)\n%s", args, r.code, r.stderr)
			}
		}
		for _, args := range [][]string{{"--help"}, {"vm", "--help"}, {"vm", "power", "--help"}, {"vm", "snapshot", "create", "--help"}} {
			if r := c.ctl(ctl, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage: crimuxctl") {
				t.Fatalf("crimuxctl %v: exit %d\n%s", args, r.code, r.stdout)
			}
		}
		var vms struct {
			VMs []json.RawMessage `json:"vms"`
		}
		mustJSON(t, c.ctlOK(t, ctl, "-o", "json", "vm", "list"), &vms)
		if len(vms.VMs) != 1 {
			t.Fatalf("vm list -o json: %d VMs, want 1", len(vms.VMs))
		}
	})
}
