package podnet

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// GuestPackets counts the packets the guest has sent on its pod network
// since the tap was made: what qemu wrote into the tap is what the tap
// receives. The tap outlives each qemu, so a caller compares counts.
func (m *Manager) GuestPackets(a *Attachment) (uint64, error) {
	if !a.Ready {
		return 0, fmt.Errorf("network in %s is not set up", a.NetNS)
	}
	var n uint64
	err := inNetNS(a.NetNS, func() error {
		l, err := netlink.LinkByName(tapName)
		if err != nil {
			return fmt.Errorf("tap %s: %w", tapName, err)
		}
		if s := l.Attrs().Statistics; s != nil {
			n = s.RxPackets
		}
		return nil
	})
	return n, err
}
