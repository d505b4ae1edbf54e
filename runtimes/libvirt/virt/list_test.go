package virt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testbed"
)

// TestListAllTellsShutOff (the test bed's libvirtd): a domain libvirt
// lists shut off is Inactive, the same domain running is not. crimux's
// resync after a restart reads every VM's state from this one list.
func TestListAllTellsShutOff(t *testing.T) {
	testbed.Require(t)
	libvirtdPID(t)
	l := connect(t)
	name := fmt.Sprintf("virt-list-test-%d", os.Getpid())
	d, err := l.Define(fmt.Sprintf(idleDomainXML, name))
	if err != nil {
		t.Fatalf("define: %v", err)
	}
	t.Cleanup(func() {
		_ = l.Destroy(d)
		if err := l.Undefine(d); err != nil {
			t.Errorf("undefine %s: %v", name, err)
		}
	})
	if got := listed(t, l, name); !got.Inactive() {
		t.Fatalf("a defined domain listed with ID %d, want -1 (shut off)", got.ID)
	}
	if err := l.Start(d); err != nil {
		t.Fatalf("start: %v", err)
	}
	if got := listed(t, l, name); got.Inactive() {
		t.Fatalf("a running domain listed as shut off (ID %d)", got.ID)
	}
	if err := l.Destroy(d); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if got := listed(t, l, name); !got.Inactive() {
		t.Fatalf("a destroyed domain listed with ID %d, want -1 (shut off)", got.ID)
	}
}

// idleDomainXML is a domain qemu runs without a disk or a kernel (its
// firmware finds nothing to boot and waits), under qemu itself rather
// than the test bed's wrapper, which only crimux's placement serves.
const idleDomainXML = `<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>32</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
  </devices>
</domain>`

// connect returns the test bed's libvirtd, connected until the test ends.
func connect(t *testing.T) Libvirt {
	t.Helper()
	got := make(chan Libvirt, 1)
	c, err := NewConn("qemu:///system", slog.New(slog.NewTextHandler(io.Discard, nil)), func(ctx context.Context, l Libvirt) {
		got <- l
		<-ctx.Done()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	t.Cleanup(func() { cancel(); <-c.done })
	select {
	case l := <-got:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no connection to libvirtd within 10s")
		return nil
	}
}

// listed is the domain named name in libvirt's list of all domains.
func listed(t *testing.T, l Libvirt, name string) Domain {
	t.Helper()
	doms, err := l.ListAll()
	if err != nil {
		t.Fatalf("list domains: %v", err)
	}
	for _, d := range doms {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("%s is not in libvirt's list of %d domains", name, len(doms))
	return Domain{}
}
