package podnet

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IsolatedTap is a tap alone in a network namespace of its own, with no
// name in the filesystem and no CNI: a VM that must have its NIC (a
// template being made: its clones' qemu loads that NIC's state) but may
// reach nothing. The namespace lives as long as ns is open: Close ends
// both, and a crimux that dies ends them with its files.
type IsolatedTap struct {
	Tap *os.File
	ns  *os.File
}

// Close closes the tap and the namespace.
func (t *IsolatedTap) Close() error {
	err := t.Tap.Close()
	if e := t.ns.Close(); err == nil {
		err = e
	}
	return err
}

// NewIsolatedTap makes a new network namespace holding one tap, up, and
// returns the tap's file (for qemu) and the namespace's.
func NewIsolatedTap() (*IsolatedTap, error) {
	var t IsolatedTap
	err := onThreadIn(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("new network namespace: %w", err)
		}
		return nil
	}, func() error {
		ns, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			return fmt.Errorf("open the new netns: %w", err)
		}
		tap, err := openTapHere(tapName)
		if err != nil {
			ns.Close()
			return err
		}
		if l, err := netlink.LinkByName(tapName); err != nil || netlink.LinkSetUp(l) != nil {
			tap.Close()
			ns.Close()
			return fmt.Errorf("set %s up in a new netns: %v", tapName, err)
		}
		t = IsolatedTap{Tap: tap, ns: ns}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// NICArgs are the qemu arguments of a guest NIC with mac on a tap whose
// file the wrapper numbers fd: the same device, at the same address, as
// every pod VM's (Attachment.QemuArgs).
func NICArgs(mac, fd string) []string {
	return (&Attachment{GuestMAC: mac}).QemuArgs(fd)
}
