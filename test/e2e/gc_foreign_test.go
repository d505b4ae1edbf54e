package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// foreignList is crimuxctl gc -o json.
type foreignList struct {
	Resources []struct {
		Kind, Name, Instance, State, Detail string
	} `json:"resources"`
}

// find returns the instance and state of kind/name, ok false if unlisted.
func (l foreignList) find(kind, name string) (instance, state string, ok bool) {
	for _, r := range l.Resources {
		if r.Kind == kind && r.Name == name {
			return r.Instance, r.State, true
		}
	}
	return "", "", false
}

// TestGCForeign: a VM pod of crimux A, killed, is another identity's to
// crimux B (a state dir of its own) on the same libvirtd. B's collector
// leaves its domain and namespace alone, B's crimuxctl gc lists both with
// A's identity, and gc --delete removes the domain, then the namespace
// with its IPAM lease and veth.
func TestGCForeign(t *testing.T) {
	requireVM(t)
	ctl := ctlBin(t)
	a := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	a.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	podID, ctrID, _ := startVMNetPod(t, a, "gc-foreign", parent, 0, "")
	snap := snapshotPodNet(t, a, podID)
	domain, netns := domainOf(ctrID), filepath.Base(snap.netns)
	idA, err := os.ReadFile(filepath.Join(a.stateDir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	instanceA := strings.TrimSpace(string(idA))
	a.kill()

	b := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	t.Cleanup(func() { // what a failed test leaves: B's gc, else virsh
		b.ctl(ctl, "gc", "--delete", "netns/"+netns)
		b.ctl(ctl, "gc", "--delete", "domain/"+domain)
		_ = exec.Command("virsh", "-c", "qemu:///system", "destroy", domain).Run()
		_ = exec.Command("virsh", "-c", "qemu:///system", "undefine", domain, "--managed-save", "--snapshots-metadata").Run()
	})
	time.Sleep(2 * time.Second) // B's first collector pass runs when it connects to libvirtd
	if st := virsh(t, "domstate", domain); st != "running" {
		t.Fatalf("B's collector touched A's domain %s: %s", domain, st)
	}
	if x := virsh(t, "dumpxml", domain); !strings.Contains(x, instanceA) {
		t.Fatalf("A's domain %s no longer carries A's identity %s", domain, instanceA)
	}
	if lease, err := os.ReadFile(filepath.Join(bed.ipamDir, snap.ip)); err != nil || !strings.Contains(string(lease), snap.sandboxID) {
		t.Fatalf("B's collector touched A's pod network: lease of %s %q, %v", snap.ip, lease, err)
	}
	if _, err := os.Stat(snap.netns); err != nil {
		t.Fatalf("B's collector touched A's namespace: %v", err)
	}

	var list foreignList
	mustJSON(t, b.ctlOK(t, ctl, "gc", "-o", "json"), &list)
	if inst, state, ok := list.find("domain", domain); !ok || inst != instanceA || state != "running" {
		t.Fatalf("gc lists domain %s as %q %q (%v), want A's identity %s, running:\n%+v", domain, inst, state, ok, instanceA, list)
	}
	if inst, _, ok := list.find("netns", netns); !ok || inst != instanceA {
		t.Fatalf("gc lists netns %s as %q (%v), want A's identity %s:\n%+v", netns, inst, ok, instanceA, list)
	}
	b.ctlFails(t, ctl, "NotFound", []string{"crimux-nope"}, "gc", "--delete", "domain/crimux-nope")

	b.ctlOK(t, ctl, "gc", "--delete", "domain/"+domain)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("gc --delete left domain %s:\n%s", domain, out)
	}
	b.ctlOK(t, ctl, "gc", "--delete", "netns/"+netns)
	snap.assertReleased(t, "after gc --delete netns/"+netns)

	list = foreignList{}
	mustJSON(t, b.ctlOK(t, ctl, "gc", "-o", "json"), &list)
	if _, _, ok := list.find("domain", domain); ok {
		t.Fatalf("gc still lists the deleted domain: %+v", list)
	}
	if _, _, ok := list.find("netns", netns); ok {
		t.Fatalf("gc still lists the deleted netns: %+v", list)
	}
}
