package migration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// rig is two nodes, each with its fake libvirtd, the source's joined to
// the target's: VMs leave source for target.
type rig struct {
	src, dst       *virtfake.Libvirt
	source, target *Node
}

// newRig starts both nodes on one test PKI; edit may change the source
// node's config.
func newRig(t *testing.T, edit func(*Config)) *rig {
	t.Helper()
	pki := writePKI(t)
	r := &rig{src: virtfake.New(), dst: virtfake.New(), source: startNode(t, pki, edit), target: startNode(t, pki, nil)}
	r.src.SetPeer(r.dst)
	t.Cleanup(func() { r.src.SetMigrateHook(nil) })
	return r
}

// move runs VM name on the source and prepares the target to receive it
// as destName: the Move the source's crimux would make of it.
func (r *rig) move(t *testing.T, name, destName string) Move {
	t.Helper()
	uid, gid := qemuIdentity()
	return r.moveAs(t, name, destName, uid, gid)
}

// moveAs is move with the qemus running as uid and gid: the target's
// streams reach only a socket uid listens on.
func (r *rig) moveAs(t *testing.T, name, destName string, uid, gid int) Move {
	t.Helper()
	r.src.Put(name, virtfake.Domain{State: virt.StateRunning, XML: fmt.Sprintf("<domain type='qemu'><name>%s</name></domain>", name)})
	dom, err := r.src.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	token, err := r.target.Expect(destName, uid, gid, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.target.Forget(destName) })
	return Move{Domain: dom, DestXML: fmt.Sprintf("<domain type='qemu'><name>%s</name><uuid>0b6e3a4c-1d2e-4f50-8a9b-0c1d2e3f4a5b</uuid></domain>", name),
		DestName: destName, Disks: []string{"vda"}, Token: token, Target: r.target.Address(),
		TargetLibvirtURI: r.target.Config().LibvirtURI, UID: uid, GID: gid, SizeBytes: 1 << 30}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// abortedByClient is libvirt's answer to a migration aborted.
var abortedByClient = errors.New("operation aborted: migration out job: canceled by client")

// untilAborted is a Migrate hook that runs until the migration is
// aborted, then ends as answer says.
func untilAborted(l *virtfake.Libvirt, answer error) func(virt.Migration) error {
	return func(virt.Migration) error {
		for deadline := time.Now().Add(10 * time.Second); l.Calls("AbortMigration") == 0; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("test: the migration was never aborted")
			}
		}
		return answer
	}
}

// TestSendMovesTheDomain: the VM runs on the target under the name the
// target gave it, from the XML it prepared, and is shut off here (still
// defined, migrated away); libvirt was asked for a peer-to-peer
// migration to the target's libvirtd with this node's key pair, its
// streams on this node's sockets of the token, the root disk copied, the
// configured bandwidth and auto-converge. The sockets go with the
// migration.
func TestSendMovesTheDomain(t *testing.T) {
	r := newRig(t, func(c *Config) { c.BandwidthMiB = 64 })
	m := r.move(t, "crimux-vm--a", "crimux-vm--b")
	if err := r.source.Send(context.Background(), r.src, m, nil); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if d, ok := r.dst.Domain("crimux-vm--b"); !ok || d.State != virt.StateRunning || d.XML != m.DestXML {
		t.Errorf("on the target: %+v (defined %v), want crimux-vm--b running from the prepared XML", d, ok)
	}
	if d, _ := r.src.Domain("crimux-vm--a"); d.State != virt.StateShutoff || !d.MigratedAway {
		t.Errorf("on the source: state %s, migrated away %v; want shut off, migrated away", d.State, d.MigratedAway)
	}
	migs := r.src.Migrations()
	if len(migs) != 1 {
		t.Fatalf("migrations %+v, want one", migs)
	}
	got := migs[0]
	dir := filepath.Join(r.source.Config().SocketDir, m.Token)
	if got.MemoryURI != "unix://"+dir+"/mem.sock" || got.DisksURI != "unix://"+dir+"/disk.sock" {
		t.Errorf("stream URIs %s, %s; want this node's sockets in %s", got.MemoryURI, got.DisksURI, dir)
	}
	if got.DestName != "crimux-vm--b" || got.DestXML != m.DestXML || !slices.Equal(got.Disks, []string{"vda"}) ||
		got.BandwidthMiB != 64 || !got.AutoConverge {
		t.Errorf("migration %+v: want the prepared name, XML and disks, 64 MiB/s, auto-converge", got)
	}
	peer, err := url.Parse(got.PeerURI)
	if err != nil || peer.Scheme != "qemu+tls" || peer.Host != "127.0.0.1" || peer.Query().Get("pkipath") != r.source.Config().PKIDir {
		t.Errorf("peer URI %q (%v): want the target's libvirtd with pkipath %s", got.PeerURI, err, r.source.Config().PKIDir)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the migration's socket dir is left: %v", err)
	}
}

// TestSendCarriesTheStreams: what the source qemu writes to the memory
// and disk stream URIs libvirt was given reaches the target qemu's
// sockets of the token, through both nodes' TLS endpoint.
func TestSendCarriesTheStreams(t *testing.T) {
	r := newRig(t, nil)
	// The target qemu's listeners below are this test's: its uid is the
	// one the target expects.
	m := r.moveAs(t, "crimux-vm--a", "crimux-vm--b", os.Geteuid(), os.Getegid())
	received := map[string]chan string{}
	for _, ch := range Channels { // the target qemu's listeners
		ln, err := net.Listen("unix", filepath.Join(r.target.Dir(m.Token), ch+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		received[ch] = make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			b, _ := io.ReadAll(c)
			received[ch] <- string(b)
		}()
	}
	r.src.SetMigrateHook(func(mig virt.Migration) error { // the source qemu
		for ch, uri := range map[string]string{"mem": mig.MemoryURI, "disk": mig.DisksURI} {
			c, err := net.Dial("unix", strings.TrimPrefix(uri, "unix://"))
			if err != nil {
				return fmt.Errorf("test: dial %s: %w", uri, err)
			}
			io.WriteString(c, "the "+ch+" stream")
			c.(*net.UnixConn).CloseWrite()
			select {
			case got := <-received[ch]:
				if got != "the "+ch+" stream" {
					return fmt.Errorf("test: the target's %s socket read %q", ch, got)
				}
			case <-time.After(10 * time.Second):
				return fmt.Errorf("test: nothing reached the target's %s socket", ch)
			}
			c.Close()
		}
		return nil
	})
	if err := r.source.Send(context.Background(), r.src, m, nil); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// TestSendAbortsPastTheCompletionTimeout: a migration that runs past
// its time (CompletionTimeoutPerGiB for each GiB) is aborted, the VM
// runs on here, and the error says why, wrapping DeadlineExceeded.
func TestSendAbortsPastTheCompletionTimeout(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CompletionTimeoutPerGiB = 100 * time.Millisecond })
	m := r.move(t, "crimux-vm--a", "crimux-vm--b")
	r.src.SetMigrateHook(untilAborted(r.src, abortedByClient))
	start := time.Now()
	err := r.source.Send(context.Background(), r.src, m, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "completion timeout of 100ms") || !strings.Contains(err.Error(), "canceled by client") {
		t.Fatalf("Send: %v; want DeadlineExceeded naming the timeout and libvirt's answer", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("aborted after %s, before the timeout", took)
	}
	if n := r.src.Calls("AbortMigration"); n != 1 {
		t.Errorf("AbortMigration called %d times, want once", n)
	}
	if d, _ := r.src.Domain("crimux-vm--a"); d.State != virt.StateRunning {
		t.Errorf("the source domain is %s, want running", d.State)
	}
	if _, ok := r.dst.Domain("crimux-vm--b"); ok {
		t.Error("the domain arrived on the target")
	}
}

// TestSendAbortsWhenCancelled: a caller that gives up aborts the
// migration; the error wraps context.Canceled.
func TestSendAbortsWhenCancelled(t *testing.T) {
	r := newRig(t, nil)
	m := r.move(t, "crimux-vm--a", "crimux-vm--b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := untilAborted(r.src, abortedByClient)
	r.src.SetMigrateHook(func(mig virt.Migration) error { cancel(); return wait(mig) })
	err := r.source.Send(ctx, r.src, m, nil)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("Send: %v; want one wrapping context.Canceled", err)
	}
	if n := r.src.Calls("AbortMigration"); n != 1 {
		t.Errorf("AbortMigration called %d times, want once", n)
	}
}

// TestSendAbortTooLate: a migration that completes although it was
// aborted (the switch-over had begun) runs on the target: Send says so
// with nil, not with the timeout.
func TestSendAbortTooLate(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CompletionTimeoutPerGiB = 50 * time.Millisecond })
	m := r.move(t, "crimux-vm--a", "crimux-vm--b")
	r.src.SetMigrateHook(untilAborted(r.src, nil))
	if err := r.source.Send(context.Background(), r.src, m, nil); err != nil {
		t.Fatalf("Send: %v, want nil: the VM runs on the target", err)
	}
	if d, ok := r.dst.Domain("crimux-vm--b"); !ok || d.State != virt.StateRunning {
		t.Errorf("the domain is not running on the target: %+v", d)
	}
}

// TestSendRefusesATargetURI that is not qemu+tls: InvalidArgument naming
// target.libvirt_uri, libvirt never asked, and the node's slot given
// back (the next VM leaves).
func TestSendRefusesATargetURI(t *testing.T) {
	r := newRig(t, nil)
	m := r.move(t, "crimux-vm--a", "crimux-vm--b")
	m.TargetLibvirtURI = "qemu+ssh://127.0.0.1/system"
	err := r.source.Send(context.Background(), r.src, m, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "target.libvirt_uri") {
		t.Fatalf("Send: %v, want InvalidArgument naming target.libvirt_uri", err)
	}
	if len(r.src.Migrations()) != 0 {
		t.Fatalf("libvirt was asked to migrate: %+v", r.src.Migrations())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.source.Send(ctx, r.src, r.move(t, "crimux-vm--c", "crimux-vm--d"), nil); err != nil {
		t.Fatalf("the next Send: %v", err)
	}
}

// TestSendWaitsForTheOtherMigrations: with MaxOutgoing 1, a VM waits
// while another leaves: as long as its caller lets it (then an error
// wrapping DeadlineExceeded, libvirt never asked), or until the other
// ends, and then it leaves.
func TestSendWaitsForTheOtherMigrations(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxOutgoing = 1 })
	release := make(chan struct{})
	r.src.SetMigrateHook(func(m virt.Migration) error {
		if m.DestName == "crimux-vm--b1" {
			<-release
		}
		return nil
	})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	first := make(chan error, 1)
	m1 := r.move(t, "crimux-vm--a1", "crimux-vm--b1")
	go func() { first <- r.source.Send(context.Background(), r.src, m1, nil) }()
	waitUntil(t, "the first migration", func() bool { return len(r.src.Migrations()) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := r.source.Send(ctx, r.src, r.move(t, "crimux-vm--a2", "crimux-vm--b2"), nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for this node's other migrations") {
		t.Fatalf("a Send whose context ends while it waits: %v; want DeadlineExceeded saying it waited", err)
	}

	third := make(chan error, 1)
	m3 := r.move(t, "crimux-vm--a3", "crimux-vm--b3")
	go func() { third <- r.source.Send(context.Background(), r.src, m3, nil) }()
	time.Sleep(200 * time.Millisecond)
	if n := len(r.src.Migrations()); n != 1 {
		t.Fatalf("%d migrations asked of libvirt while the first runs, want 1", n)
	}
	releaseOnce()
	for name, done := range map[string]chan error{"first": first, "third": third} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the %s Send: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s Send did not end", name)
		}
	}
	if migs := r.src.Migrations(); len(migs) != 2 || migs[1].DestName != "crimux-vm--b3" {
		t.Errorf("migrations %+v, want b1 then b3", migs)
	}
}

// TestSendLetsMaxOutgoingLeaveAtOnce: MaxOutgoing 2 lets two VMs leave
// together.
func TestSendLetsMaxOutgoingLeaveAtOnce(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxOutgoing = 2 })
	release := make(chan struct{})
	r.src.SetMigrateHook(func(virt.Migration) error { <-release; return nil })
	done := make(chan error, 2)
	for _, name := range []string{"1", "2"} {
		m := r.move(t, "crimux-vm--a"+name, "crimux-vm--b"+name)
		go func() { done <- r.source.Send(context.Background(), r.src, m, nil) }()
	}
	waitUntil(t, "two migrations at once", func() bool { return len(r.src.Migrations()) == 2 })
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Send: %v", err)
		}
	}
}
