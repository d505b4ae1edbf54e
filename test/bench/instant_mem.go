package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What a clone's qemu holds of the host's memory beside a cold-booted
// guest's: read from /proc/PID/smaps_rollup of the VM's qemu once its
// agent answered and instantSettle passed, Rss (its resident pages) and
// Pss (each page shared with other processes divided among them). A
// clone's RAM is loaded from its template's save image through a pipe,
// into memory of its own: what can share it between clones is the
// host's KSM, whose state is noted beside the figures and left alone.

const (
	// instantSettle is how long a guest runs after its agent answered
	// before its memory is read: a cold guest's boot is still touching
	// memory then, a clone's agent calls (becoming itself) are done.
	instantSettle = 10 * time.Second
	// libvirtQemuRun is where libvirtd (qemu:///system) keeps a pid file
	// per running domain.
	libvirtQemuRun = "/run/libvirt/qemu"
	// ksmDir is the host's KSM (kernel samepage merging) state.
	ksmDir = "/sys/kernel/mm/ksm"
)

// qemuMemory is a VM's qemu's memory, in MiB.
type qemuMemory struct {
	pid            int
	rssMiB, pssMiB float64
}

func (m qemuMemory) String() string {
	return fmt.Sprintf("Rss %.0f MiB, Pss %.0f MiB", m.rssMiB, m.pssMiB)
}

// qemuPid is the pid of domain's qemu: libvirt's pid file of it, checked
// against the process's command line, else the process whose command
// line names the domain (as pgrep -f guest=DOMAIN finds it).
func qemuPid(domain string) (int, error) {
	if b, err := os.ReadFile(filepath.Join(libvirtQemuRun, domain+".pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && namesDomain(pid, domain) {
			return pid, nil
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && namesDomain(pid, domain) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no qemu process of domain %s", domain)
}

// namesDomain: pid's command line has qemu's -name guest=DOMAIN[,...].
func namesDomain(pid int, domain string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if name, ok := bytes.CutPrefix(arg, []byte("guest=")); ok {
			name, _, _ = bytes.Cut(name, []byte(","))
			if string(name) == domain {
				return true
			}
		}
	}
	return false
}

// readQemuMemory reads the Rss and Pss of domain's qemu.
func readQemuMemory(domain string) (qemuMemory, error) {
	pid, err := qemuPid(domain)
	if err != nil {
		return qemuMemory{}, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return qemuMemory{}, err
	}
	m := qemuMemory{pid: pid, rssMiB: math.NaN(), pssMiB: math.NaN()}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			m.rssMiB = kb / 1024
		case "Pss:":
			m.pssMiB = kb / 1024
		}
	}
	if math.IsNaN(m.rssMiB) || math.IsNaN(m.pssMiB) {
		return m, fmt.Errorf("no Rss or Pss in /proc/%d/smaps_rollup (qemu of %s)", pid, domain)
	}
	return m, nil
}

// settledMemory waits instantSettle, then reads v's qemu's memory.
func settledMemory(ctx context.Context, v *vmPod) (qemuMemory, error) {
	select {
	case <-ctx.Done():
		return qemuMemory{}, ctx.Err()
	case <-time.After(instantSettle):
	}
	return readQemuMemory(v.domain())
}

// ksmState is the host's KSM setting and what it shares now, for the
// notes; the bench never changes it.
func ksmState() string {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(ksmDir, name))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	run, sharing := read("run"), read("pages_sharing")
	s := fmt.Sprintf("KSM run=%s, pages_sharing=%s", run, sharing)
	if n, err := strconv.ParseFloat(sharing, 64); err == nil {
		s += fmt.Sprintf(" (%.0f MiB)", n*float64(os.Getpagesize())/(1<<20))
	}
	return s + " (the host's setting, left as it is)"
}

// medianOf is the lower median of xs, NaN when empty (as stats.MedianRatio).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)+1)/2-1]
}

// coldGuestMemory boots the Debian guest pod as crimuxGuestRound does (no
// annotation: a cold boot) and reads its qemu's memory once it settled.
func (b *bench) coldGuestMemory(ctx context.Context, name string) (qemuMemory, error) {
	ctx, cancel := context.WithTimeout(ctx, guestReadyTimeout)
	defer cancel()
	v, err := b.startVMWith(ctx, name, b.guestContainerConfig(), func(p *runtimeapi.PodSandboxConfig) { p.Hostname = name })
	defer func() {
		if v != nil {
			_ = b.removeVM(context.WithoutCancel(ctx), v)
		}
	}()
	if err != nil {
		return qemuMemory{}, err
	}
	if err := waitAgent(ctx, b.direct, v.domain()); err != nil {
		return qemuMemory{}, fmt.Errorf("guest agent of %s: %w", v.domain(), err)
	}
	return settledMemory(ctx, v)
}

// guestMemories reads a clone's qemu's memory, the clone alone on the
// host of the run's VM pods, then a cold-booted guest's.
func (b *bench) guestMemories(ctx context.Context) error {
	var clone qemuMemory
	_, cloneErr := b.instantRound(ctx, "instant-mem", func(v *vmPod) error {
		var err error
		clone, err = settledMemory(ctx, v)
		return err
	})
	cold, coldErr := b.coldGuestMemory(ctx, "instant-mem-cold")
	ksm := ksmState()
	b.logf("instant: qemu memory %s after the agent answered: clone %s (%v), cold guest %s (%v); %s",
		instantSettle, clone, cloneErr, cold, coldErr, ksm)
	for _, f := range []struct {
		name string
		m    qemuMemory
		err  error
		what string
	}{
		{"vm_instant_clone_rss_mib", clone, cloneErr, "a clone restored from its template (the log says so)"},
		{"vm_cold_guest_rss_mib", cold, coldErr, "a cold-booted guest pod (no annotation)"},
	} {
		if f.err == nil {
			b.res.Set(f.name, f.m.rssMiB, f.m.String(), "")
		}
		b.res.Note(f.name, "%s: %s, no other VM of this phase running, %s after its agent answered: Rss of its qemu's /proc/PID/smaps_rollup "+
			"(pid from libvirt's pid file); %s", instantShape, f.what, instantSettle, ksm)
		if f.err != nil {
			b.res.Note(f.name, "not measured: %v", f.err)
		}
	}
	if cloneErr != nil {
		return cloneErr
	}
	return coldErr
}
