package migration

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// TestCompletionTimeoutPerStartedGiB: a migration gets the configured
// time for each GiB it started, and at least one GiB's.
func TestCompletionTimeoutPerStartedGiB(t *testing.T) {
	const gib = uint64(1) << 30
	n := &Node{cfg: Config{CompletionTimeoutPerGiB: 10 * time.Second}}
	for _, c := range []struct {
		size uint64
		want time.Duration
	}{
		{0, 10 * time.Second},
		{1, 10 * time.Second},
		{gib - 1, 10 * time.Second},
		{gib, 10 * time.Second},
		{gib + 1, 20 * time.Second},
		{2 * gib, 20 * time.Second},
		{5*gib + gib/2, 60 * time.Second},
		{64 * gib, 640 * time.Second},
	} {
		if got := n.completionTimeout(c.size); got != c.want {
			t.Errorf("completionTimeout(%d bytes) = %s, want %s", c.size, got, c.want)
		}
	}
}

// TestPeerURI: the target's advertised libvirt URI gets this node's
// pkipath (its other parameters kept); a URI that is not qemu+tls to a
// host is refused, naming it.
func TestPeerURI(t *testing.T) {
	n := &Node{cfg: Config{PKIDir: "/etc/pki/crimux node"}}
	got, err := n.PeerURI("qemu+tls://node-2.example:16514/system?keepalive_interval=5")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatalf("PeerURI gave %q, which does not parse: %v", got, err)
	}
	q := u.Query()
	if u.Scheme != "qemu+tls" || u.Host != "node-2.example:16514" || u.Path != "/system" ||
		q.Get("pkipath") != "/etc/pki/crimux node" || q.Get("keepalive_interval") != "5" {
		t.Errorf("PeerURI = %q: want the target's URI with pkipath=%s", got, n.cfg.PKIDir)
	}
	if got, err := n.PeerURI("qemu+tls://node-2/system?pkipath=/elsewhere"); err != nil || !strings.Contains(got, url.QueryEscape(n.cfg.PKIDir)) || strings.Contains(got, "elsewhere") {
		t.Errorf("a URI with a pkipath of its own: %q, %v; want this node's alone", got, err)
	}
	for _, bad := range []string{
		"qemu+ssh://node-2/system",
		"qemu:///system",
		"qemu+tls:///system",
		"qemu+tcp://node-2/system",
		"node-2:16514",
		"qemu+tls://node 2/%zz",
		"",
	} {
		if got, err := n.PeerURI(bad); err == nil || !strings.Contains(err.Error(), "qemu+tls") {
			t.Errorf("PeerURI(%q) = %q, %v; want an error", bad, got, err)
		}
	}
}

// TestNilNodeMigratesNothing: a node with migration off says so with
// FailedPrecondition, and asks nothing of libvirt.
func TestNilNodeMigratesNothing(t *testing.T) {
	var n *Node
	l := virtfake.New()
	l.Put("crimux-vm--a", virtfake.Domain{State: virt.StateRunning})
	dom, err := l.Lookup("crimux-vm--a")
	if err != nil {
		t.Fatal(err)
	}
	err = n.Send(context.Background(), l, Move{Domain: dom, TargetLibvirtURI: "qemu+tls://node-2/system"}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "live migration is off") {
		t.Errorf("Send: %v, want FailedPrecondition saying live migration is off", err)
	}
	if len(l.Migrations()) != 0 {
		t.Errorf("libvirt was asked to migrate: %+v", l.Migrations())
	}
	if _, err := n.Expect("vm--b", 0, 0, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Expect: %v, want FailedPrecondition", err)
	}
	if n.Expecting("vm--b") {
		t.Error("Expecting: true")
	}
	n.Forget("vm--b")
	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStartRefusesAMissingPKI: a node whose pkipath holds no key pair
// does not start (it could neither serve nor reach a peer).
func TestStartRefusesAMissingPKI(t *testing.T) {
	n, err := Start(Config{Address: "127.0.0.1:0", PKIDir: t.TempDir(), SocketDir: shortDir(t)}, nil)
	if err == nil {
		n.Close()
		t.Fatal("no error")
	}
	if !strings.Contains(err.Error(), "cacert.pem") {
		t.Errorf("err %v, want one naming the CA file", err)
	}
}

// TestStartDefaults: a node started with no MaxOutgoing lets one VM
// leave at a time, and listens where peers can reach it.
func TestStartDefaults(t *testing.T) {
	n := startNode(t, writePKI(t), nil)
	if cap(n.out) != 1 {
		t.Errorf("MaxOutgoing 0 lets %d VMs leave at once, want 1", cap(n.out))
	}
	if !strings.HasPrefix(n.Address(), "127.0.0.1:") || strings.HasSuffix(n.Address(), ":0") {
		t.Errorf("Address %q, want 127.0.0.1 and the port it listens on", n.Address())
	}
}

// TestSetTunables: a reload's tunables are the node's from then on; the
// rest of its config stays as it started.
func TestSetTunables(t *testing.T) {
	n := &Node{cfg: Config{PKIDir: "/pki", CompletionTimeoutPerGiB: 10 * time.Second, MaxOutgoing: 2}}
	n.SetTunables(Tunables{BandwidthMiB: 64, CompletionTimeoutPerGiB: time.Minute, ProgressTimeout: 5 * time.Second, TargetTimeout: time.Hour})
	cfg := n.Config()
	if cfg.BandwidthMiB != 64 || cfg.ProgressTimeout != 5*time.Second || cfg.TargetTimeout != time.Hour || cfg.PKIDir != "/pki" || cfg.MaxOutgoing != 2 {
		t.Fatalf("config after SetTunables: %+v", cfg)
	}
	if got := n.completionTimeout(1 << 30); got != time.Minute {
		t.Fatalf("completionTimeout after SetTunables = %s, want 1m", got)
	}
	var none *Node
	none.SetTunables(Tunables{}) // a node taking part in no migration
}
