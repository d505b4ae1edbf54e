package virtiofs

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
)

// TestConnectedPair: the listening end accepts the connection already made
// to it, and nothing is left in the directory.
func TestConnectedPair(t *testing.T) {
	dir := t.TempDir()
	listener, client, err := connectedPair(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	defer client.Close()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left in %s: %v", dir, left)
	}
	l, err := net.FileListener(listener)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.FileConn(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := srv.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// TestHelperArgs: the helper is told the directory and its mode, and
// virtiofsd serves the listening socket with its own sandbox.
func TestHelperArgs(t *testing.T) {
	got := strings.Join(HelperArgs(vm.Share{HostPath: "/v/cm", ReadOnly: true}, "/usr/lib/qemu/virtiofsd"), " ")
	want := "virtiofsd-sandbox /v/cm ro -- /usr/lib/qemu/virtiofsd --fd=3 -o source=/v/cm,cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn --thread-pool-size=4"
	if got != want {
		t.Fatalf("helper args:\n%s\nwant\n%s", got, want)
	}
}

// TestGateRefusesWithoutRelease: a helper whose gate closes unopened (crimux
// could not place it) never runs virtiofsd.
func TestGateRefusesWithoutRelease(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := waitGate(r); err == nil {
		t.Fatal("the gate opened on EOF")
	}
	r, w, _ = os.Pipe()
	go func() { w.Write([]byte(gateOpen)); w.Close() }()
	if err := waitGate(r); err != nil {
		t.Fatal(err)
	}
}

// TestHelperMainUsage: a malformed command line is refused.
func TestHelperMainUsage(t *testing.T) {
	if code := HelperMain([]string{"/d", "rx", "--", "/bin/true"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
