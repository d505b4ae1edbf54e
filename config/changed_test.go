package config

import (
	"fmt"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	a := Default().Libvirt
	b := a
	if got := Changed("libvirt", a, b); len(got) != 0 {
		t.Fatalf("Changed of equal sections = %q", got)
	}
	b.Accel = "kvm"
	b.AgentCallsPerVM = 9
	b.GuestBootTimeout = Duration{time.Minute}
	b.CNIBinDirs = []string{"/x"}
	b.Migration.Address = "10.0.0.1:7345"
	want := []string{"libvirt.accel", "libvirt.agent_calls_per_vm", "libvirt.cni_bin_dirs",
		"libvirt.guest_boot_timeout", "libvirt.migration.address"}
	if got := Changed("libvirt", a, b); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Changed = %q, want %q", got, want)
	}
}

// TestLiveKeysAreKeys: every live key is a key of the reference.
func TestLiveKeysAreKeys(t *testing.T) {
	ref, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, k := range ref {
		known[k.Name] = true
	}
	for k := range LiveKeys {
		if !known[k] && k != "runtime" {
			t.Errorf("LiveKeys names %q, no key of the configuration", k)
		}
	}
}
