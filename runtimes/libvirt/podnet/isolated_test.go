package podnet

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestIsolatedTap: the tap is in a namespace of its own, not the
// caller's, and the namespace goes with Close.
func TestIsolatedTap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace and a tap)")
	}
	own, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	tap, err := NewIsolatedTap()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", tap.ns.Fd()))
	if err != nil || ns == own || !strings.HasPrefix(ns, "net:[") {
		t.Fatalf("isolated tap's netns %q (%v), caller's %q", ns, err, own)
	}
	if _, err := netlink.LinkByName(tapName); err == nil {
		t.Fatalf("%s shows in the caller's namespace", tapName)
	}
	var got []string
	if err := inNetNS(fmt.Sprintf("/proc/self/fd/%d", tap.ns.Fd()), func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			got = append(got, fmt.Sprintf("%s/up=%t", l.Attrs().Name, l.Attrs().Flags&net.FlagUp != 0))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "lo/up=false,crimux-tap0/up=true" {
		t.Fatalf("the isolated namespace holds %v, want the tap and lo", got)
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
}
