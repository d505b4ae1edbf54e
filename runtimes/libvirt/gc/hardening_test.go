package gc

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// stampedDomainXML is a domain named name carrying crimux's metadata m.
func stampedDomainXML(t *testing.T, name string, m vm.Metadata) string {
	t.Helper()
	b, err := xml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("<domain type='qemu'><name>%s</name><metadata>%s</metadata></domain>", name, b)
}

const (
	hardenedCtr = "0123456789abcdef0123456789abcdef"
	hardenedSb  = "fedcba9876543210fedcba9876543210"
)

// TestCollectorKeepsWhatItCannotRead: a VM whose record cannot be decoded
// is unknown, not absent: its stopped domain is not removed, its directory
// (its overlay disk) is kept, its record stays.
func TestCollectorKeepsWhatItCannotRead(t *testing.T) {
	e := coretest.New(t)
	c := New(e.R)
	if err := e.R.Store.PutRawContainer(hardenedCtr, []byte(`{"id": 5}`)); err != nil {
		t.Fatal(err)
	}
	dir := e.R.VMDir(hardenedCtr)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disk.qcow2"), []byte("the guest's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := vm.DomainName(hardenedCtr)
	e.Libvirt.Put(name, virtfake.Domain{State: virt.StateShutoff, XML: stampedDomainXML(t, name,
		vm.Metadata{Instance: "i", SandboxID: hardenedSb, ContainerID: hardenedCtr})})
	rep := c.CollectGarbage(context.Background(), true)
	if _, ok := e.Libvirt.Domain(name); !ok {
		t.Fatal("the domain of an unreadable record was removed")
	}
	if _, err := os.Stat(filepath.Join(dir, "disk.qcow2")); err != nil {
		t.Fatalf("the overlay of an unreadable record was removed: %v", err)
	}
	if _, err := e.R.Store.AnyContainer(hardenedCtr); err == nil {
		t.Fatal("the unreadable record was overwritten")
	}
	if rep.Pending == 0 || rep.Domains != 0 || rep.Dirs != 0 {
		t.Fatalf("report %+v: want the VM pending, nothing removed", rep)
	}
}

// TestCollectorRereadsUnderTheLock: the first pass after a restart lists a
// record still Creating while CreateContainer holds the pod's lock; when
// the call finishes first, the pass must see the finished record and leave
// the VM alone.
func TestCollectorRereadsUnderTheLock(t *testing.T) {
	e := coretest.New(t)
	c := New(e.R)
	e.PutPod(t, hardenedSb, nil)
	rec := e.PutVM(t, hardenedSb, hardenedCtr, runtimeapi.ContainerState_CONTAINER_CREATED, "")
	rec.Creating = true
	if err := e.R.Store.PutContainer(rec); err != nil {
		t.Fatal(err)
	}
	unlock := e.R.Locks.Lock(hardenedSb) // CreateContainer in flight
	done := make(chan GCReport)
	go func() { done <- c.CollectGarbage(context.Background(), true) }()
	time.Sleep(200 * time.Millisecond) // the pass has listed the records and waits for the lock
	rec.Creating = false               // CreateContainer finishes
	if err := e.R.Store.PutContainer(rec); err != nil {
		t.Fatal(err)
	}
	unlock()
	rep := <-done
	if _, ok := e.Libvirt.Domain(rec.Domain); !ok {
		t.Fatal("the pass tore down a VM whose CreateContainer had finished")
	}
	if got, err := e.R.Store.Container(hardenedCtr); err != nil || got.Creating {
		t.Fatalf("record after the pass: %+v, %v", got, err)
	}
	if rep.Records != 0 {
		t.Fatalf("report %+v: nothing should have been torn down", rep)
	}
}

// TestAdoptionRefusesForgedIDs: a running domain stamped with this
// instance whose metadata names IDs crimux never mints ("../../../etc") is
// reported, never adopted: its "directory" would be /etc, removed with the
// pod.
func TestAdoptionRefusesForgedIDs(t *testing.T) {
	for _, m := range []vm.Metadata{
		{Instance: "i", SandboxID: hardenedSb, ContainerID: "../../../etc"},
		{Instance: "i", SandboxID: "../../../etc", ContainerID: hardenedCtr},
		{Instance: "i", SandboxID: hardenedSb, ContainerID: "ffffffffffffffffffffffffffffffff"}, // not this domain's
	} {
		t.Run(m.SandboxID+"/"+m.ContainerID, func(t *testing.T) {
			e := coretest.New(t)
			c := New(e.R)
			name := vm.DomainName(hardenedCtr)
			e.Libvirt.Put(name, virtfake.Domain{State: virt.StateRunning, XML: stampedDomainXML(t, name, m)})
			rep := c.CollectGarbage(context.Background(), false)
			recs, _ := e.R.Store.Containers()
			sbs, _ := e.R.Store.Sandboxes()
			if len(recs) != 0 || len(sbs) != 0 || rep.Adopted != 0 {
				t.Fatalf("adopted %s: records %v, pods %v, report %+v", m.ContainerID, ids(recs), len(sbs), rep)
			}
			if len(rep.Foreign) != 1 || rep.Foreign[0] != name {
				t.Fatalf("report %+v: want %s reported as foreign", rep, name)
			}
		})
	}
}

func ids(recs []*store.Container) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.ID+" -> "+r.Dir)
	}
	return out
}
