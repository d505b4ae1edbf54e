package placer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/internal/testbed"
)

// The integration test runs a real TCG domain through libvirtd with the
// installed wrapper as its emulator (test/bed/libvirt-up.sh sets that up)
// and checks that every qemu process libvirt starts for it lives in the
// pod's cgroup.

const (
	libvirtURI       = "qemu:///system"
	installedWrapper = "/usr/local/lib/crimux/crimux-qemu-wrapper"
	testParentRoot   = "/crimux-test"
)

func skipWithoutLibvirt(t *testing.T) {
	t.Helper()
	testbed.Require(t)
	if os.Getuid() != 0 {
		t.Fatal("test bed: needs root")
	}
	_, err := os.Stat(installedWrapper)
	testbed.Need(t, err, "%s (test/bed/libvirt-up.sh installs it)", installedWrapper)
	_, err = exec.LookPath("virsh")
	testbed.Need(t, err, "virsh")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = exec.CommandContext(ctx, "virsh", "-c", libvirtURI, "version").Run()
	testbed.Need(t, err, "libvirtd at %s (test/bed/libvirt-up.sh starts it)", libvirtURI)
	conf, err := os.ReadFile("/etc/libvirt/qemu.conf")
	testbed.Need(t, err, "libvirt's qemu.conf")
	if !strings.Contains(string(conf), "\ncgroup_controllers = [ ]") {
		t.Fatal("test bed: libvirt manages qemu's cgroups: set cgroup_controllers = [ ] in /etc/libvirt/qemu.conf (test/bed/libvirt-up.sh)")
	}
}

func virsh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-q", "-c", libvirtURI}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func mustVirsh(t *testing.T, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := virsh(t, args...)
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	t.Logf("virsh %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func cloudKernel(t *testing.T) (kernel, initrd string) {
	t.Helper()
	kernels, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	if len(kernels) == 0 {
		t.Fatal("test bed: no /boot/vmlinuz-*-cloud-amd64 (test/bed/install.sh installs linux-image-cloud-amd64)")
	}
	kernel = kernels[len(kernels)-1]
	initrd = strings.Replace(kernel, "vmlinuz-", "initrd.img-", 1)
	_, err := os.Stat(initrd)
	testbed.Need(t, err, "%s", initrd)
	return kernel, initrd
}

func domainXML(name, kernel, initrd, disk, socket string) string {
	return fmt.Sprintf(`<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>%s</name>
  <memory unit='MiB'>128</memory>
  <vcpu current='1'>2</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s</kernel>
    <initrd>%s</initrd>
    <cmdline>console=ttyS0 quiet</cmdline>
  </os>
  <devices>
    <emulator>%s</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='pty'/>
    <console type='pty'/>
  </devices>
  <qemu:commandline>
    <qemu:env name='CRIMUX_PLACEMENT_SOCKET' value='%s'/>
  </qemu:commandline>
</domain>
`, name, kernel, initrd, installedWrapper, disk, socket)
}

// qemuPid is the pid of the domain's current qemu process.
func qemuPid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/run/libvirt/qemu/" + name + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkAllThreads checks every line of every thread's cgroup file.
func checkAllThreads(t *testing.T, pid int, leaf string) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/cgroup", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := cgroup.CheckProcCgroup(string(b), leaf); err != nil {
			t.Errorf("qemu pid %d thread %s: %v", pid, task.Name(), err)
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, task.Name()))
		names = append(names, strings.TrimSpace(string(comm)))
	}
	if len(tasks) < 3 {
		t.Errorf("qemu pid %d has %d threads (%v), expected vCPU threads too", pid, len(tasks), names)
	}
	t.Logf("qemu pid %d: %d threads in %s: %s", pid, len(tasks), leaf, strings.Join(names, ", "))
}

// readTrimUint reads a file holding one number.
func readTrimUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// removeTestParents removes the pod parent and, if empty, the test root in
// every hierarchy: the package never removes a parent itself.
func removeTestParents(t *testing.T, l cgroup.Layout, parent string) {
	t.Helper()
	for _, h := range l.Hierarchies {
		for _, p := range []string{parent, testParentRoot} {
			err := unix.Rmdir(filepath.Join(h.Mount, p))
			if err != nil && !errors.Is(err, unix.ENOENT) && !(p == testParentRoot && errors.Is(err, unix.EBUSY)) {
				t.Errorf("remove test parent %s: %v", filepath.Join(h.Mount, p), err)
			}
		}
	}
}

func TestVMInPodCgroup(t *testing.T) {
	skipWithoutLibvirt(t)
	kernel, initrd := cloudKernel(t)
	layout, err := cgroup.Discover()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup mode %s, %d hierarchies", layout.Mode(), len(layout.Hierarchies))

	id := randomHex(t, 4)
	domain := "crimux-cgtest-" + id
	spec := cgroup.Spec{
		Parent: testParentRoot + "/pod" + id, Name: "crimux-vm-" + id,
		CPUQuota: 50000, CPUPeriod: 100000, CPUShares: 512,
		// 128 MiB of guest RAM plus qemu's own (TCG's translation cache,
		// the vmstate buffers of save and restore).
		MemoryLimit: 768 << 20,
	}
	_, leaf, err := spec.Paths()
	if err != nil {
		t.Fatal(err)
	}

	// What the VM runtime does at CreateContainer/StartContainer: the leaf
	// with its limits exists before libvirt starts qemu.
	if err := layout.Create(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := layout.Remove(spec); err != nil {
			t.Errorf("Remove: %v", err)
		}
		removeTestParents(t, layout, spec.Parent)
	})

	// The placement server, on a socket the qemu user can reach.
	dir, err := os.MkdirTemp("", "crimux-cgtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "placement.sock")
	var placements atomic.Int32
	uids := []uint32{0}
	if u, err := user.Lookup("libvirt-qemu"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		uids = append(uids, uint32(uid))
	}
	newPlacer := func() *Placer {
		return New(sock, func(name string) (cgroup.Spec, bool) {
			if name != domain {
				return cgroup.Spec{}, false
			}
			placements.Add(1)
			return spec, true
		}, WithExecutable(installedWrapper), WithPeerUIDs(uids...))
	}
	// startPlacer serves until the returned stop is called (crimux's life).
	startPlacer := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- newPlacer().Serve(ctx) }()
		return func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	}
	stopPlacer := startPlacer()
	t.Cleanup(func() { stopPlacer() })

	disk := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", disk, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(domainXML(domain, kernel, initrd, disk, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	mustVirsh(t, "define", xmlPath)
	t.Cleanup(func() {
		_, _ = virsh(t, "destroy", domain)
		if out, err := virsh(t, "undefine", domain, "--managed-save", "--snapshots-metadata"); err != nil {
			t.Errorf("undefine %s: %v: %s", domain, err, out)
		}
		if t.Failed() {
			log, _ := os.ReadFile("/var/log/libvirt/qemu/" + domain + ".log")
			t.Logf("domain log:\n%s", log)
		}
	})

	mustVirsh(t, "start", domain)
	pid := qemuPid(t, domain)
	checkAllThreads(t, pid, leaf)

	t.Run("limits", func(t *testing.T) {
		if h, ok := layout.Controller("memory"); ok && !h.Unified {
			if got := readTrim(t, filepath.Join(h.Mount, leaf, "memory.limit_in_bytes")); got != strconv.FormatInt(spec.MemoryLimit, 10) {
				t.Errorf("memory.limit_in_bytes = %s, want %d", got, spec.MemoryLimit)
			}
		}
		if h, ok := layout.Controller("cpu"); ok && !h.Unified {
			if got := readTrim(t, filepath.Join(h.Mount, leaf, "cpu.cfs_quota_us")); got != "50000" {
				t.Errorf("cpu.cfs_quota_us = %s, want 50000", got)
			}
			if got := readTrim(t, filepath.Join(h.Mount, leaf, "cpu.shares")); got != "512" {
				t.Errorf("cpu.shares = %s, want 512", got)
			}
		}
		if h, ok := layout.Controller("memory"); ok && h.Unified {
			if got := readTrim(t, filepath.Join(h.Mount, leaf, "memory.max")); got != strconv.FormatInt(spec.MemoryLimit, 10) {
				t.Errorf("memory.max = %s, want %d", got, spec.MemoryLimit)
			}
		}
	})

	t.Run("stats", func(t *testing.T) {
		time.Sleep(time.Second)
		u, err := layout.Stats(spec)
		if err != nil {
			t.Fatal(err)
		}
		cpu, mem := u.CPUNanos, u.WorkingSetBytes
		if cpu == 0 || mem == 0 || u.MemoryBytes < mem {
			t.Errorf("Stats = %+v; want CPU and working set non-zero, the charge at least the working set", u)
		}
		t.Logf("after ~1 s: cpu %v, working set %d MiB", time.Duration(cpu), mem>>20)
		// The quota is an upper bound whatever the guest does (a booting
		// TCG guest takes all it gets): 50% of a CPU, one period of slack.
		const window = 2 * time.Second
		start := time.Now()
		time.Sleep(window)
		u2, err := layout.Stats(spec)
		if err != nil {
			t.Fatal(err)
		}
		used, elapsed := time.Duration(u2.CPUNanos-cpu), time.Since(start)
		if limit := elapsed/2 + 100*time.Millisecond; used > limit {
			t.Errorf("qemu used %v of CPU in %v under a 50%% quota", used, elapsed)
		}
		t.Logf("qemu used %v of CPU in %v under a 50%% quota", used.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	})

	t.Run("update", func(t *testing.T) {
		up := spec
		up.CPUQuota, up.MemoryLimit = 30000, 640<<20
		if err := layout.Update(up); err != nil {
			t.Fatal(err)
		}
		if h, ok := layout.Controller("cpu"); ok && !h.Unified {
			if got := readTrim(t, filepath.Join(h.Mount, leaf, "cpu.cfs_quota_us")); got != "30000" {
				t.Errorf("cpu.cfs_quota_us after Update = %s, want 30000", got)
			}
		}
		if err := layout.Update(spec); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("suspend and resume keep the process", func(t *testing.T) {
		mustVirsh(t, "suspend", domain)
		mustVirsh(t, "resume", domain)
		if p := qemuPid(t, domain); p != pid {
			t.Errorf("qemu pid changed from %d to %d", pid, p)
		}
		checkAllThreads(t, pid, leaf)
	})

	t.Run("snapshot revert", func(t *testing.T) {
		mustVirsh(t, "snapshot-create-as", domain, "snap1")
		mustVirsh(t, "snapshot-revert", domain, "snap1")
		p := qemuPid(t, domain)
		t.Logf("qemu pid %d before revert, %d after", pid, p)
		checkAllThreads(t, p, leaf)
		pid = p
	})

	t.Run("managedsave and start run a new qemu in the pod", func(t *testing.T) {
		before := placements.Load()
		mustVirsh(t, "managedsave", domain)
		mustVirsh(t, "start", domain)
		p := qemuPid(t, domain)
		if p == pid {
			t.Errorf("qemu pid %d unchanged after managedsave and start", p)
		}
		if placements.Load() == before {
			t.Error("the wrapper did not ask for placement for the restored qemu")
		}
		checkAllThreads(t, p, leaf)
		pid = p
	})

	t.Run("crimux restarting while libvirt starts qemu", func(t *testing.T) {
		mustVirsh(t, "destroy", domain)
		stopPlacer()
		started := make(chan error, 1)
		go func() {
			out, err := virsh(t, "start", domain)
			if err != nil {
				err = fmt.Errorf("%w: %s", err, out)
			}
			started <- err
		}()
		time.Sleep(3 * time.Second) // the wrapper keeps retrying meanwhile
		stopPlacer = startPlacer()
		if err := <-started; err != nil {
			t.Fatalf("virsh start across a placer restart: %v", err)
		}
		pid = qemuPid(t, domain)
		checkAllThreads(t, pid, leaf)
	})

	// Last: libvirt 9.0 cannot revert an internal snapshot taken after a
	// vCPU hotplug (the new qemu starts with the persistent vCPU count and
	// loadvm fails on the extra CPU's section).
	t.Run("vcpu hotplug", func(t *testing.T) {
		mustVirsh(t, "setvcpus", domain, "2", "--live")
		checkAllThreads(t, pid, leaf)
	})

	t.Run("unknown VM does not start", func(t *testing.T) {
		other := "crimux-cgtest-x" + id
		xml := filepath.Join(dir, "other.xml")
		if err := os.WriteFile(xml, []byte(domainXML(other, kernel, initrd, disk+"-other", sock)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", disk+"-other", "16M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img: %v: %s", err, out)
		}
		out, err := virsh(t, "create", xml)
		if err == nil {
			_, _ = virsh(t, "destroy", other)
			t.Fatal("a domain crimux does not know started")
		}
		// libvirtd quotes qemu's last words (the wrapper's refusal) when
		// it reads them before it finds the monitor gone; else they are
		// in the domain's log only (CI saw "failed to connect to monitor
		// socket: Connection refused").
		domainLog, _ := os.ReadFile("/var/log/libvirt/qemu/" + other + ".log")
		if reason := "no VM of crimux is named " + other; !strings.Contains(out, reason) && !strings.Contains(string(domainLog), reason) {
			t.Errorf("virsh create failed without the placer's reason, in its message or the domain's log: %s\n%s", out, domainLog)
		}
		t.Logf("virsh create of an unknown VM: %s", out)
	})

	if h, ok := layout.Controller("memory"); ok && !h.Unified {
		// A data point for the VM runtime's memory overhead.
		if peak, err := readTrimUint(filepath.Join(h.Mount, leaf, "memory.max_usage_in_bytes")); err == nil {
			t.Logf("peak memory of the VM's cgroup (128 MiB guest, TCG, save/restore included): %d MiB", peak>>20)
		}
	}
	mustVirsh(t, "destroy", domain)
	if err := layout.Remove(spec); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	dirs, _ := layout.LeafDirs(spec)
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leaf %s still there after Remove: %v", d, err)
		}
	}
	for _, h := range layout.Hierarchies {
		if _, err := os.Stat(filepath.Join(h.Mount, spec.Parent)); err != nil {
			t.Errorf("Remove took the parent in %s: %v", h.Mount, err)
		}
	}
	if err := layout.Remove(spec); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
