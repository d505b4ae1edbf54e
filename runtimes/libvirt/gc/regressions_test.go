package gc

import (
	"context"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Regression tests of collector defects found by the unit tests on the
// fake (each failed before its fix): an error of libvirt or the store is
// never read as "nothing there".

// A domain listing that fails leaves collectDomains' present set empty,
// and collectDirs then removes the directory (the overlay disk) of a
// running VM of this crimux that has no record; the next pass adopts
// the VM without its disk.
func TestRegressionListAllFailureRemovesARunningVMsDisk(t *testing.T) {
	e := newEnv(t)
	e.putDomain(orphanDom, ours(t), virt.StateRunning)
	dir := e.vmDir(t, orphanCtr)
	e.Libvirt.Fail("ListAll", boom)
	e.gc.CollectGarbage(context.Background(), false)
	if !exists(dir) {
		t.Fatal("the disk of a running VM was removed because ListAll failed once")
	}
}

// A State call that fails is read as "not running": the collector then
// destroys and undefines a running VM of this crimux it should adopt.
func TestRegressionStateFailureDestroysARunningOrphan(t *testing.T) {
	e := newEnv(t)
	e.putDomain(orphanDom, ours(t), virt.StateRunning)
	e.Libvirt.Fail("State", boom)
	rep := e.gc.CollectGarbage(context.Background(), false)
	if _, ok := e.hasDomain(orphanDom); !ok || e.Libvirt.Calls("Destroy") != 0 {
		t.Fatalf("a running VM was destroyed because State failed once: report %+v", rep)
	}
}

// foreignUser ignores a domain whose XML cannot be read (describeDomain
// reports it with the error as Detail, and no sandbox): the namespace of
// a running VM of another identity is then adopted, and the next pass
// runs CNI DEL on it as an orphan of this crimux, under the VM.
func TestRegressionUnreadableDomainLosesItsNetns(t *testing.T) {
	e, l, n := foreignEnv(t)
	l.Fail("XML", boom)
	if err := e.gc.adoptForeignNetns(l, "other_"+sbA); err == nil {
		t.Fatalf("the namespace of a running foreign VM was adopted (adopted %v); want a refusal while its user cannot be told", n.AdoptedNS)
	}
}

// Without a pod network the collector never looks at pod records: one
// abandoned while Creating (crimux killed in RunPodSandbox) or left
// Removing stays in the store for ever.
func TestRegressionNoNetworkLeaksAbandonedPods(t *testing.T) {
	e := newEnv(t, noNetwork)
	e.PutPod(t, "crashed", func(sb *store.Sandbox) { sb.Creating = true })
	e.PutPod(t, "removed", func(sb *store.Sandbox) { sb.Removing = true })
	e.gc.CollectGarbage(context.Background(), true)
	for _, id := range []string{"crashed", "removed"} {
		if _, err := e.R.Store.Sandbox(id); !errdefs.IsNotFound(err) {
			t.Errorf("pod %s still recorded after a pass: %v", id, err)
		}
	}
}
