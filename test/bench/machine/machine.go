// Package machine owns the facts about the machine and the versions under
// test that head the bench's report: CPU, memory, kernel, OS, Go, the load
// average, and the crimux, containerd, libvirt and qemu versions.
package machine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/libvirtdirect"
)

// Facts describe the machine and the versions under test.
type Facts struct {
	Date, CPU, Memory, Kernel, OS, GoVersion string
	Crimux, Containerd, Libvirt, Qemu        string
	Cores                                    int
	LoadStart, LoadEnd                       string
	Took                                     time.Duration
}

// Gather reads the machine's facts, and the version of the crimux binary
// crimuxBin and of qemu.
func Gather(crimuxBin string) Facts {
	h := Facts{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		CPU: fieldOf("/proc/cpuinfo", "model name", ":"), Kernel: firstLine(readFile("/proc/sys/kernel/osrelease")),
		OS: strings.Trim(fieldOf("/etc/os-release", "PRETTY_NAME", "="), `"`), LoadStart: ReadLoad(),
	}
	if kb := fieldOf("/proc/meminfo", "MemTotal", ":"); kb != "" {
		var n int64
		fmt.Sscan(strings.TrimSuffix(kb, " kB"), &n)
		h.Memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
	}
	h.Crimux = firstLine(output(crimuxBin, "version"))
	h.Qemu = firstLine(output(libvirtdirect.QEMUBinary, "--version"))
	return h
}

// Versions asks the running daemons for theirs: containerd (through its
// CRI runtime service ctd) and libvirtd.
func (h *Facts) Versions(ctx context.Context, ctd runtimeapi.RuntimeServiceClient) {
	if v, err := ctd.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
		h.Containerd = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(libvirtdirect.Socket)))
	if l.ConnectToURI(golibvirt.QEMUSystem) == nil {
		if v, err := l.ConnectGetLibVersion(); err == nil {
			h.Libvirt = fmt.Sprintf("libvirt %d.%d.%d", v/1000000, v/1000%1000, v%1000)
		}
		_ = l.Disconnect()
	}
}

// ReadLoad is the load average over 1, 5 and 15 minutes.
func ReadLoad() string {
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
