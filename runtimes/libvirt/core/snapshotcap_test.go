package core_test

import (
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/vmops"
)

// The default cap is one number wherever it is resolved: core's (the
// root disks' room, for a root volume's disk) and vmops' (the VM API).
func TestDefaultMaxSnapshotsPerVM(t *testing.T) {
	if core.DefaultMaxSnapshotsPerVM != vmops.DefaultMaxSnapshotsPerVM {
		t.Fatalf("core's default cap %d, vmops' %d", core.DefaultMaxSnapshotsPerVM, vmops.DefaultMaxSnapshotsPerVM)
	}
	e := coretest.New(t)
	if n := e.R.MaxSnapshots(); n != vmops.DefaultMaxSnapshotsPerVM {
		t.Fatalf("the cap of a runtime without one: %d", n)
	}
	e.R.Opts.MaxSnapshotsPerVM = 3
	if n := e.R.MaxSnapshots(); n != 3 {
		t.Fatalf("the cap of a runtime with 3: %d", n)
	}
}
