package virt

import (
	"context"
	"io"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"
)

// mockConn is a connection to go-libvirt's mock libvirtd.
func mockConn(t *testing.T) *golibvirt.Libvirt {
	t.Helper()
	l := golibvirt.NewWithDialer(libvirttest.New())
	if err := l.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return l
}

// TestLongCallsReuseIdleConnections: the calls that go on a connection
// of their own (here five Reboots, as a hundred exec sessions' agent
// calls would) open one, kept idle between them, not one each.
func TestLongCallsReuseIdleConnections(t *testing.T) {
	m, sock := newMockLibvirtd(t)
	c, err := NewConn("qemu:///system?socket="+sock, discard(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-c.Done() }()
	go c.Run(ctx)
	var l Libvirt
	waitFor(t, "the connection", func() bool { l, err = c.Get(); return err == nil })
	d, err := l.Lookup("test")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := l.Reboot(d); err != nil {
			t.Fatalf("Reboot: %v", err)
		}
	}
	m.mu.Lock()
	n := len(m.conns)
	m.mu.Unlock()
	if n != 2 {
		t.Fatalf("libvirtd was connected %d times: want 2 (the shared connection and one kept for the calls of their own)", n)
	}
}

// TestConnPoolKeepsOnlyWhatWorks: a connection whose call failed on the
// connection (not with libvirt's error) is closed, not kept; at most
// maxIdleConns are kept; one that went away while idle is not given out;
// drain closes them all.
func TestConnPoolKeepsOnlyWhatWorks(t *testing.T) {
	var p connPool
	broken := mockConn(t)
	p.put(broken, io.ErrUnexpectedEOF)
	if broken.IsConnected() || p.take() != nil {
		t.Fatal("a connection whose call failed on the connection was kept")
	}
	kept := mockConn(t)
	p.put(kept, golibvirt.Error{Code: uint32(golibvirt.ErrAgentUnresponsive), Message: "agent"})
	if got := p.take(); got != kept {
		t.Fatalf("a connection whose call libvirt refused was not kept: %v", got)
	}
	var all []*golibvirt.Libvirt
	for range maxIdleConns + 2 {
		l := mockConn(t)
		all = append(all, l)
		p.put(l, nil)
	}
	if closed := all[maxIdleConns:]; closed[0].IsConnected() || closed[1].IsConnected() {
		t.Errorf("more than %d idle connections kept", maxIdleConns)
	}
	_ = all[maxIdleConns-1].Disconnect() // went away while idle
	if got := p.take(); got != all[maxIdleConns-2] {
		t.Error("a closed idle connection was given out, or not the next one")
	}
	p.drain()
	for i, l := range all[:maxIdleConns-2] {
		if l.IsConnected() {
			t.Errorf("idle connection %d is open after drain", i)
		}
	}
	if p.take() != nil {
		t.Error("drain left a connection")
	}
}
