package virt

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"
	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewConnRefusesOtherURIs(t *testing.T) {
	if _, err := NewConn("qemu:///session", discard(), nil, nil); err == nil || !strings.Contains(err.Error(), "only local qemu:///system") {
		t.Fatalf("NewConn(qemu:///session) = %v", err)
	}
}

// TestConnWithoutLibvirtd: Get is Unavailable before Run and while
// libvirtd cannot be reached, saying why; Run keeps trying until its
// context ends and then closes Done.
func TestConnWithoutLibvirtd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-libvirt-sock")
	c, err := NewConn("qemu:///system?socket="+sock, discard(), func(context.Context, Libvirt) {
		t.Error("onConnect ran without libvirtd")
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get()
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "not connected yet") {
		t.Fatalf("Get before Run: %v, want Unavailable naming the socket, not connected yet", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	waitFor(t, "a failed dial", func() bool {
		_, err := c.Get()
		return err != nil && !strings.Contains(err.Error(), "not connected yet")
	})
	if _, err := c.Get(); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Get while libvirtd is unreachable: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed while Run runs")
	default:
	}
	cancel()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// mockLibvirtd serves go-libvirt's mock libvirtd (libvirttest) on a unix
// socket, one mock per connection; kill closes the connections (libvirtd
// going away).
type mockLibvirtd struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newMockLibvirtd(t *testing.T) (*mockLibvirtd, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	m := &mockLibvirtd{ln: ln}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.mu.Lock()
			m.conns = append(m.conns, c)
			m.mu.Unlock()
			m.wg.Add(1)
			go func() { defer m.wg.Done(); serveMock(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); m.kill(); m.wg.Wait() })
	return m, sock
}

func serveMock(c net.Conn) {
	p, _ := libvirttest.New().Dial()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(c, p); close(done) }()
	_, _ = io.Copy(p, c)
	p.Close() // the mock's reader sees EOF and ends
	c.Close()
	<-done
}

func (m *mockLibvirtd) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		c.Close()
	}
	m.conns = nil
}

// TestConnReconnects: Run connects, hands the connection to onConnect,
// remakes it when libvirtd goes away (counting the reconnect), and closes
// it when its context ends.
func TestConnReconnects(t *testing.T) {
	d, sock := newMockLibvirtd(t)
	connected := make(chan Libvirt, 4)
	var mu sync.Mutex
	var reconnects []string
	c, err := NewConn("qemu:///system?socket="+sock, discard(), func(ctx context.Context, l Libvirt) {
		connected <- l
		<-ctx.Done() // lives as long as the connection
	}, func(uri string) {
		mu.Lock()
		defer mu.Unlock()
		reconnects = append(reconnects, uri)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	first := receive(t, connected)
	if l, err := c.Get(); err != nil || l != first {
		t.Fatalf("Get = %v, %v; want the connection onConnect got", l, err)
	}
	dom, err := first.Lookup("test")
	if err != nil || dom.Name != "test" {
		t.Fatalf("Lookup over the connection: %+v, %v", dom, err)
	}

	d.kill()
	select {
	case <-first.Disconnected():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not notice libvirtd going away")
	}
	second := receive(t, connected)
	if second == first {
		t.Fatal("reconnected with the old connection")
	}
	mu.Lock()
	got := strings.Join(reconnects, ",")
	mu.Unlock()
	if got != "qemu:///system?socket="+sock {
		t.Fatalf("reconnects counted: %q, want one for the URI", got)
	}

	cancel()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := c.Get(); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Get after Run: %v, want Unavailable, shutting down", err)
	}
}

func receive(t *testing.T, ch <-chan Libvirt) Libvirt {
	t.Helper()
	select {
	case l := <-ch:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no connection to the mock libvirtd within 10s")
		return nil
	}
}

// TestRemote: the calls go-libvirt's mock libvirtd answers, through the
// adapter, in crimux's types.
func TestRemote(t *testing.T) {
	l := golibvirt.NewWithDialer(libvirttest.New())
	if err := l.Connect(); err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	r := remote{l: l}
	d, err := r.Lookup("test")
	if err != nil || d.Name != "test" || d.UUID == (UUID{}) {
		t.Fatalf("Lookup = %+v, %v", d, err)
	}
	doms, err := r.ListAll()
	if err != nil || len(doms) != 2 || doms[0].Name != "aaaaaaa-1" || doms[1].ID != 2 {
		t.Fatalf("ListAll = %+v, %v", doms, err)
	}
	if s, err := r.State(d); err != nil || s != StateRunning {
		t.Fatalf("State = %v, %v; want running", s, err)
	}
	for name, call := range map[string]func(Domain) error{
		"Undefine": r.Undefine, "Reboot": r.Reboot, "Reset": r.Reset, "StartPaused": r.StartPaused,
	} {
		if err := call(d); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	select {
	case <-r.Disconnected():
		t.Fatal("Disconnected closed on a live connection")
	default:
	}
}

// TestRemoteLongCallsOwnConnection: the calls that can last seconds
// (starts, destroys, saves, snapshots, the health check's Version) go on
// a connection of their own, closed after the call, so they cannot hold
// the shared connection's five request slots; when none can be opened
// they use the shared one (guest-agent calls never do:
// TestAgentCallsNeverUseTheSharedConnection).
func TestRemoteLongCallsOwnConnection(t *testing.T) {
	shared := golibvirt.NewWithDialer(libvirttest.New())
	if err := shared.Connect(); err != nil {
		t.Fatal(err)
	}
	defer shared.Disconnect()
	mocks := &mockDialer{}
	r := remote{l: shared, more: mocks}
	d, err := r.Lookup("test")
	if err != nil {
		t.Fatal(err)
	}
	if len(mocks.dialed) != 0 {
		t.Fatalf("Lookup dialed %d connections; short calls use the shared one", len(mocks.dialed))
	}
	// The long calls the mock libvirtd answers; the others go through
	// the same remote.long.
	long := map[string]func() error{
		"StartPaused": func() error { return r.StartPaused(d) },
		"Reboot":      func() error { return r.Reboot(d) },
	}
	for name, call := range long {
		n := len(mocks.dialed)
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(mocks.dialed) != n+1 {
			t.Errorf("%s dialed %d connections, want 1 of its own", name, len(mocks.dialed)-n)
			continue
		}
		if mocks.dialed[n].IsConnected() {
			t.Errorf("%s left its own connection open", name)
		}
	}
	mocks.fail = true
	for name, call := range long {
		if err := call(); err != nil {
			t.Errorf("%s with no connection of its own: %v (want the shared one used)", name, err)
		}
	}
}

// mockDialer opens connections to go-libvirt's mock libvirtd and keeps
// them, or fails.
type mockDialer struct {
	fail   bool
	dialed []*golibvirt.Libvirt
}

// release closes l (a Conn keeps it idle: pool_test.go).
func (m *mockDialer) release(l *golibvirt.Libvirt, _ error) { _ = l.Disconnect() }

func (m *mockDialer) dial() (*golibvirt.Libvirt, error) {
	if m.fail {
		return nil, io.ErrClosedPipe
	}
	l := golibvirt.NewWithDialer(libvirttest.New())
	if err := l.Connect(); err != nil {
		return nil, err
	}
	m.dialed = append(m.dialed, l)
	return l, nil
}

// TestAgentCallsNeverUseTheSharedConnection: a guest-agent call lasts as
// long as the guest makes it, so it goes on a connection of its own,
// closed after the call, and is Unavailable when none can be opened
// rather than take one of the shared connection's request slots (five,
// for every other VM's calls).
func TestAgentCallsNeverUseTheSharedConnection(t *testing.T) {
	// Never connected: a call on it fails at once, with go-libvirt's error.
	shared := golibvirt.NewWithDialer(libvirttest.New())
	mocks := &mockDialer{fail: true}
	r := remote{l: shared, more: mocks}
	done := make(chan error, 1)
	go func() {
		_, err := r.AgentCommand(Domain{Name: "test"}, `{"execute":"guest-ping"}`, time.Second)
		done <- err
	}()
	select {
	case err := <-done:
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "no connection of its own") {
			t.Fatalf("agent call with no connection of its own: %v; want Unavailable, never the shared connection", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent call did not return: it went to a libvirtd connection, not refused")
	}
}

// TestConnCapsAgentCalls: the connection a Conn hands out (Get's, and
// onConnect's) counts its agent calls against the Conn's caps.
func TestConnCapsAgentCalls(t *testing.T) {
	_, sock := newMockLibvirtd(t)
	connected := make(chan Libvirt, 1)
	c, err := NewConn("qemu:///system?socket="+sock, discard(), func(_ context.Context, l Libvirt) { connected <- l }, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetAgentCaps(AgentCaps{PerVM: 1, PerNode: 1, Wait: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-c.Done() }()
	go c.Run(ctx)
	first := receive(t, connected)
	release, err := c.agents.Take("other")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	l, err := c.Get()
	if err != nil || l != first {
		t.Fatalf("Get = %v, %v; want the connection onConnect got", l, err)
	}
	for name, conn := range map[string]Libvirt{"Get's": l, "onConnect's": first} {
		_, err := conn.AgentCommand(Domain{Name: "test"}, `{"execute":"guest-ping"}`, time.Second)
		if errdefs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "libvirt.agent_calls_per_node = 1") {
			t.Fatalf("agent call on %s connection with the node's cap taken: %v; want ResourceExhausted naming the cap", name, err)
		}
	}
}
