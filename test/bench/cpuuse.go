package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/crimux/crimux/test/bench/daemon"
)

// cpuUse is where the host's CPU time went, read at one moment: the
// host's busy time, the guests' (every qemu process, by PID: the direct
// path's qemus are in cgroups of the CPU controller only, crimux's in
// every hierarchy), and each daemon's. Two readings around a burst tell
// whether a path's guests booted later because they needed more CPU or
// because something else took it from them.
type cpuUse struct {
	at                  time.Time
	host, steal, guests time.Duration
	crimux, children    time.Duration
	daemons             map[string]time.Duration
	qemus               map[int]time.Duration
}

// qemuComm is qemu's process name (/proc/PID/comm keeps 15 bytes).
const qemuComm = "qemu-system-x86"

// cpuDaemons are the host's daemons a burst keeps busy, by process name.
var cpuDaemons = []string{"libvirtd", "virtlogd", "containerd", "crimux-bench"}

func (b *bench) readCPUUse() cpuUse {
	u := cpuUse{at: time.Now(), daemons: map[string]time.Duration{}, qemus: map[int]time.Duration{}}
	u.host, u.steal = hostBusy()
	if b.crimux != nil {
		u.crimux, u.children = b.crimux.CPUTime(), b.crimux.ChildrenCPUTime()
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range pids {
		comm, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if name == qemuComm {
			u.qemus[pid] = daemon.ProcessCPUTime(pid)
			u.guests += u.qemus[pid]
		}
		for _, d := range cpuDaemons {
			if name == d {
				u.daemons[d] += daemon.ProcessCPUTime(pid)
			}
		}
	}
	return u
}

// since is the CPU time used between an earlier reading and u. A daemon
// that restarted in between counts from zero.
func (u cpuUse) since(old cpuUse) cpuUse {
	d := cpuUse{at: u.at, host: u.host - old.host, steal: u.steal - old.steal, crimux: u.crimux - old.crimux, children: u.children - old.children, daemons: map[string]time.Duration{}}
	for pid, t := range u.qemus { // the qemus running now; those that ended are not counted
		d.guests += max(t-old.qemus[pid], 0)
	}
	for name, t := range u.daemons {
		d.daemons[name] = max(t-old.daemons[name], 0)
	}
	return d
}

// describe says, for a span of wall time on cores cores, where the CPU
// went, in seconds and as a share of the cores.
func (u cpuUse) describe(wall time.Duration, cores int) string {
	all := wall.Seconds() * float64(cores)
	pct := func(t time.Duration) string { return fmt.Sprintf("%.1f s (%.0f %%)", t.Seconds(), 100*t.Seconds()/all) }
	var b strings.Builder
	fmt.Fprintf(&b, "over %.0f s on %d cores: host busy %s, stolen by the hypervisor %s, guests %s, crimux %s, its children (CNI plugins, qemu-img) %s",
		wall.Seconds(), cores, pct(u.host), pct(u.steal), pct(u.guests), pct(u.crimux), pct(u.children))
	for _, name := range cpuDaemons {
		fmt.Fprintf(&b, ", %s %s", name, pct(u.daemons[name]))
	}
	return b.String()
}

// hostBusy is the CPU time all cores spent working since boot (user,
// nice, system, irq, softirq), and the time the hypervisor took from
// them (steal), from /proc/stat.
func hostBusy() (busy, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)[1:] // user nice system idle iowait irq softirq steal guest guest_nice
	ticks := func(i int) time.Duration {
		if i >= len(fields) {
			return 0
		}
		return daemon.Ticks(fields[i])
	}
	return ticks(0) + ticks(1) + ticks(2) + ticks(5) + ticks(6), ticks(7)
}
