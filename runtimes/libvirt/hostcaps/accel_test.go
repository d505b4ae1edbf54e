package hostcaps

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/crimux/crimux/converter/vm"
)

func TestResolveAccel(t *testing.T) {
	dir := t.TempDir()
	present, absent := filepath.Join(dir, "kvm"), filepath.Join(dir, "none")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(d string) { devKVM = d }(devKVM)
	works := func() error { return nil }
	broken := func() error { return errors.New("failed to set MSR 0x10a") }
	for _, tc := range []struct {
		accel, dev string
		probe      func() error
		want       string
	}{
		{vm.AccelKVM, absent, broken, vm.AccelKVM}, // asked for: as is
		{vm.AccelTCG, present, works, vm.AccelTCG},
		{"auto", absent, works, vm.AccelTCG},
		{"", present, works, vm.AccelKVM},
		{"auto", present, works, vm.AccelKVM},
		{"auto", present, broken, vm.AccelTCG}, // nested KVM that aborts qemu
	} {
		devKVM = tc.dev
		if got := ResolveAccel(tc.accel, tc.probe, slog.Default()); got != tc.want {
			t.Errorf("ResolveAccel(%q) with %s, probe %v = %s, want %s", tc.accel, filepath.Base(tc.dev), tc.probe(), got, tc.want)
		}
	}
}

// TestKVMProbeOfOwnIdentities: where VMs run as identities of their own,
// a /dev/kvm they cannot open fails the probe before qemu is run; one
// open to all does not (kvmOpenToAll).
func TestKVMProbeOfOwnIdentities(t *testing.T) {
	dir := t.TempDir()
	defer func(d string) { devKVM = d }(devKVM)
	devKVM = filepath.Join(dir, "kvm")
	if err := os.WriteFile(devKVM, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := KVMProbe(true)(); err == nil {
		t.Fatal("a /dev/kvm of mode 0660 passed the probe of VMs of their own identities")
	}
	if err := os.Chmod(devKVM, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := kvmOpenToAll(); err != nil {
		t.Fatalf("a /dev/kvm of mode 0666: %v", err)
	}
	devKVM = filepath.Join(dir, "none")
	if err := kvmOpenToAll(); err == nil {
		t.Fatal("no /dev/kvm passed")
	}
}

func TestLastLine(t *testing.T) {
	if got := lastLine("qemu: one\nqemu: failed to set MSR 0x10a\n\n"); got != "qemu: failed to set MSR 0x10a" {
		t.Fatalf("lastLine = %q", got)
	}
}
