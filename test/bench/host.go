package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/identity"
)

const (
	// benchWrapper is crimux-qemu-wrapper built to ask benchPlacementSocket:
	// the bed's wrapper asks /run/crimux/placement.sock, which any other
	// crimux on the host (tests running alongside) takes over when it
	// starts, and then refuses to place the bench's VMs.
	benchWrapper         = "/usr/local/lib/crimux/crimux-qemu-wrapper-bench"
	benchPlacementSocket = "/run/crimux-bench/placement.sock"
	// cgroupRoot is the parent of every VM pod's cgroup parent.
	cgroupRoot = "/crimux-bench"
)

// hostFacts describe the machine and the versions under test.
type hostFacts struct {
	date, cpu, memory, kernel, os, goVersion string
	crimux, containerd, libvirt, qemu        string
	cores                                    int
	loadStart, loadEnd                       string
	took                                     time.Duration
}

func gatherHost(o options) hostFacts {
	h := hostFacts{
		date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), cores: runtime.NumCPU(), goVersion: runtime.Version(),
		cpu: fieldOf("/proc/cpuinfo", "model name", ":"), kernel: firstLine(readFile("/proc/sys/kernel/osrelease")),
		os: strings.Trim(fieldOf("/etc/os-release", "PRETTY_NAME", "="), `"`), loadStart: readLoad(),
	}
	if kb := fieldOf("/proc/meminfo", "MemTotal", ":"); kb != "" {
		var n int64
		fmt.Sscan(strings.TrimSuffix(kb, " kB"), &n)
		h.memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
	}
	h.crimux = firstLine(output(o.crimuxBin, "version"))
	h.qemu = firstLine(output(qemuBinary, "--version"))
	return h
}

// versions asks the running daemons for theirs.
func (h *hostFacts) versions(ctx context.Context, b *bench) {
	if v, err := b.ctd.rt.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
		h.containerd = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(libvirtSock)))
	if l.ConnectToURI(golibvirt.QEMUSystem) == nil {
		if v, err := l.ConnectGetLibVersion(); err == nil {
			h.libvirt = fmt.Sprintf("libvirt %d.%d.%d", v/1000000, v/1000%1000, v%1000)
		}
		_ = l.Disconnect()
	}
}

// checkBed fails unless containerd, libvirtd and the registry's images
// are there (make bed).
func checkBed(o options) error {
	sock := strings.TrimPrefix(o.containerd, "unix://")
	if _, err := os.Stat(sock); err != nil {
		return fmt.Errorf("containerd socket %s: %w (run make bed)", sock, err)
	}
	if _, err := os.Stat(libvirtSock); err != nil {
		return fmt.Errorf("libvirtd socket %s: %w (run make bed)", libvirtSock, err)
	}
	if _, err := os.Stat(o.crimuxBin); err != nil {
		return fmt.Errorf("crimux binary: %w (run make build)", err)
	}
	return nil
}

// installWrapper installs the bench's qemu wrapper when it changed, or
// when qemu is newer than it (libvirt caches qemu's capabilities by the
// emulator's ctime, as test/bed/libvirt-up.sh explains).
func installWrapper(src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("bench qemu wrapper: %w", err)
	}
	if !bytes.Contains(data, []byte(benchPlacementSocket)) {
		return fmt.Errorf("bench qemu wrapper %s is not built for %s (-ldflags -X main.placementSocket=%s)", src, benchPlacementSocket, benchPlacementSocket)
	}
	old, err := os.ReadFile(benchWrapper)
	qemu, qerr := os.Stat(qemuBinary)
	installed, ierr := os.Stat(benchWrapper)
	if err == nil && bytes.Equal(old, data) && qerr == nil && ierr == nil && !qemu.ModTime().After(installed.ModTime()) {
		return nil
	}
	tmp := benchWrapper + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("install bench qemu wrapper (make bed installs its directory): %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, benchWrapper)
}

// instanceOf is the identity crimux stamps on its domains: the one
// derived for its state dir (the bench starts from an empty one).
func instanceOf(dir string) string {
	return identity.Derive(filepath.Join(dir, "state"))
}

// removeDomainsOf destroys and undefines every domain stamped with
// instance: the safety net for VMs crimux could not remove.
func removeDomainsOf(instance string) error {
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(libvirtSock)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return err
	}
	defer l.Disconnect()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, "crimux-") {
			continue
		}
		x, err := l.DomainGetXMLDesc(d, 0)
		if err != nil {
			continue
		}
		var dom libvirtxml.Domain
		if dom.Unmarshal(x) != nil {
			continue
		}
		if m, ok := vm.ParseMetadata(&dom); ok && m.Instance == instance {
			errs = append(errs, destroyDomain(l, d.Name))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 ones and the
// unified one, wherever it is).
func cgroupHierarchies() []string {
	var out []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		out = append(out, "/sys/fs/cgroup")
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		dir := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); e.IsDir() && err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// removeCgroup removes a pod's cgroup parent, children first, in every
// hierarchy (crimux removes the VM's own cgroup; the parent is kubelet's
// to remove, here the bench's).
func removeCgroup(parent string) {
	for _, h := range cgroupHierarchies() {
		removeTree(filepath.Join(h, parent))
	}
}

func removeTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// removeCgroupsOf removes the run's pod cgroups, and the bench's root
// cgroup when nothing else is left in it.
func removeCgroupsOf(runID string) error {
	var left []string
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, cgroupRoot)
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), runID+"-") {
				removeTree(filepath.Join(root, e.Name()))
				if _, err := os.Stat(filepath.Join(root, e.Name())); err == nil {
					left = append(left, filepath.Join(root, e.Name()))
				}
			}
		}
		_ = os.Remove(root) // fails while another run's cgroups are there
	}
	if len(left) > 0 {
		return fmt.Errorf("%d cgroups not removed, e.g. %s: processes still in them (the next run's sweep retries)", len(left), left[0])
	}
	return nil
}

func readLoad() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// fieldOf is the value of the first "key<sep>value" line of a file.
func fieldOf(path, key, sep string) string {
	for _, line := range strings.Split(readFile(path), "\n") {
		k, v, ok := strings.Cut(line, sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func output(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}
