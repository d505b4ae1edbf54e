// Package hostcaps owns what the host offers VMs and how crimux finds
// out: the accelerator (KVM proved to run a guest, else TCG), the huge
// pages a VM's RAM may be backed by, and libvirt's directories opened to
// the VMs' own identities.
package hostcaps

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/crimux/crimux/converter/vm"
)

// devKVM is the KVM device whose presence makes auto consider KVM.
var devKVM = "/dev/kvm"

// qemuBinary is the emulator crimux's qemu wrapper runs (its qemuBinary).
const qemuBinary = "/usr/bin/qemu-system-x86_64"

// probeTimeout bounds the KVM probe: a kernel boots to its root mount in
// well under a second with KVM (in under 3 s even under TCG here).
const probeTimeout = 5 * time.Second

// ResolveAccel turns auto into kvm when /dev/kvm exists and a VM can be
// made with it (works says so), else tcg. /dev/kvm alone is not enough:
// in a nested guest whose host does not pass the CPU's MSRs through, qemu
// aborts at its first vCPU reset ("failed to set MSR 0x10a"), so every VM
// would fail to start.
func ResolveAccel(accel string, works func() error, log *slog.Logger) string {
	if accel != "auto" && accel != "" {
		return accel
	}
	if _, err := os.Stat(devKVM); err != nil {
		return vm.AccelTCG
	}
	if err := works(); err != nil {
		log.Warn("accel auto: "+devKVM+" exists but qemu cannot run a VM with KVM here; VMs use tcg", "err", err)
		return vm.AccelTCG
	}
	return vm.AccelKVM
}

// KVMProbe is how auto decides KVM works: qemu must run a KVM guest
// (probeKVM), and, where VMs run as identities of their own, those must
// be able to open /dev/kvm (kvmOpenToAll).
func KVMProbe(ownIdentities bool) func() error {
	return func() error {
		if ownIdentities {
			if err := kvmOpenToAll(); err != nil {
				return err
			}
		}
		return probeKVM()
	}
}

// probeKVM proves KVM runs a guest, not only that qemu can set a vCPU up:
// in a nested guest whose host half-supports virtualisation, qemu starts
// and the guest hangs in its kernel's first instructions ("Probing EDD")
// at full CPU while libvirt reports it running. It boots the host's own
// kernel (kernelForProbe) with no root disk: the kernel must reach its
// "VFS: Unable to mount root fs" panic within probeTimeout (a fraction of
// a second with KVM). Without a kernel to boot, it falls back to starting
// qemu stopped (startsStopped).
func probeKVM() error {
	kernel, err := kernelForProbe()
	if err != nil {
		if ferr := startsStopped(); ferr != nil {
			return ferr
		}
		return nil
	}
	return bootsToMarker(kernel)
}

// probeMarker is what the host kernel prints when it has booted as far as
// mounting its root file system, which the probe gives it none of.
const probeMarker = "Unable to mount root fs"

// bootsToMarker boots kernel under KVM and waits for probeMarker on its
// serial console.
func bootsToMarker(kernel string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemuBinary, "-accel", "kvm", "-cpu", "host", "-machine", "pc",
		"-nodefaults", "-display", "none", "-m", "256", "-no-reboot", "-serial", "stdio",
		"-kernel", kernel, "-append", "console=ttyS0 panic=-1 quiet loglevel=3")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if strings.Contains(out.String(), probeMarker) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("a KVM guest (%s) did not boot within %v: KVM here starts guests that never run (nested virtualisation without full support?)", kernel, probeTimeout)
	}
	return fmt.Errorf("a KVM guest (%s) failed after %v: %v: %s", kernel, time.Since(start).Round(time.Millisecond), err, lastLine(out.String()))
}

// kernelForProbe is the newest kernel in /boot the probe can boot.
func kernelForProbe() (string, error) {
	ks, _ := filepath.Glob(bootKernels)
	for i := len(ks) - 1; i >= 0; i-- {
		if f, err := os.Open(ks[i]); err == nil {
			f.Close()
			return ks[i], nil
		}
	}
	return "", fmt.Errorf("no kernel matches %s", bootKernels)
}

// bootKernels are where a host keeps its kernels.
var bootKernels = "/boot/vmlinuz-*"

// startsStopped starts the emulator with KVM and the host's CPU, as a VM
// gets them, stopped before its first instruction, and quits it from its
// monitor: it fails where qemu cannot set a KVM vCPU up.
func startsStopped() error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemuBinary, "-accel", "kvm", "-cpu", "host", "-machine", "pc",
		"-nodefaults", "-display", "none", "-m", "16", "-S", "-monitor", "stdio", "-serial", "none")
	cmd.Stdin = strings.NewReader("quit\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", qemuBinary, err, lastLine(stderr.String()))
	}
	return nil
}

// kvmOpenToAll fails when VMs of their own identities could not open
// /dev/kvm: they have no supplementary groups (libvirt gives a numeric
// "+UID:+GID" label none), so the kvm group does not let them in; the
// device must be read-write for others (udev's 0666, systemd's default).
func kvmOpenToAll() error {
	fi, err := os.Stat(devKVM)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o006 != 0o006 {
		return fmt.Errorf("%s is %v: VMs run each as a uid of its own, outside the kvm group, and need it 0666", devKVM, fi.Mode().Perm())
	}
	return nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
