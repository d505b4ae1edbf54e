package core

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/crimux/crimux/converter/vm"
)

// devKVM is the KVM device whose presence makes auto consider KVM.
var devKVM = "/dev/kvm"

// qemuBinary is the emulator crimux's qemu wrapper runs (its qemuBinary).
const qemuBinary = "/usr/bin/qemu-system-x86_64"

// probeTimeout bounds the KVM probe (it takes about 80 ms).
const probeTimeout = 10 * time.Second

// resolveAccel turns auto into kvm when /dev/kvm exists and a VM can be
// made with it (works says so), else tcg. /dev/kvm alone is not enough:
// in a nested guest whose host does not pass the CPU's MSRs through, qemu
// aborts at its first vCPU reset ("failed to set MSR 0x10a"), so every VM
// would fail to start.
func resolveAccel(accel string, works func() error, log *slog.Logger) string {
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

// probeKVM starts the emulator with KVM and the host's CPU, as a VM gets
// them, stopped before its first instruction, and quits it from its
// monitor: it fails where qemu cannot set a KVM vCPU up.
func probeKVM() error {
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
