package vm

import "fmt"

// The qemu arguments of a VM's storage, handed to qemu with the files
// they name (fd is the placeholder of the file in the placement answer).
// Node, chardev and device IDs start with "crimux-" so they never meet
// libvirt's own (libvirt names its devices by alias: virtio-disk0, …).

// Storage devices take fixed PCI slots below the guest NIC's (0x1e, in
// runtimes/libvirt/podnet) on the i440fx machine's one bus, downward
// (volume i: slot 0x1d-i, so 0x0e-0x1d for 16), out of the way of
// libvirt's, which it assigns from slot 2 up: qemu reads the wrapper's
// arguments first, so a device left to pick its own slot would take one
// libvirt has given another device.
const topSlot = 0x1d

func slot(i int) string { return fmt.Sprintf("bus=pci.0,addr=%#x", topSlot-i) }

// fdSetBase numbers the fd sets of block devices: -add-fd set N is
// reached as /dev/fdset/N; libvirt 9.0 names no fd sets of its own on
// these domains.
const fdSetBase = 100

// QemuArgs are the arguments giving the guest volume i, block device, as a
// virtio-blk disk on the open file fd: an fd set (qemu opens
// /dev/fdset/N, never a host path), a host_device node, read-only when
// the device is, and the virtio-blk-pci device with the serial.
func (b BlockDevice) QemuArgs(i int, fd string) []string {
	node := fmt.Sprintf("crimux-blk%d", i)
	set := fdSetBase + i
	ro := "off"
	if b.ReadOnly {
		ro = "on"
	}
	return []string{
		"-add-fd", fmt.Sprintf("fd=%s,set=%d", fd, set),
		"-blockdev", fmt.Sprintf("driver=host_device,node-name=%s,filename=/dev/fdset/%d,read-only=%s,cache.direct=off,discard=unmap", node, set, ro),
		"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,id=%s-dev,serial=%s,%s", node, node, b.Serial, slot(i)),
	}
}

// QemuArgs are the arguments giving the guest volume i, a share, through the
// connected vhost-user socket fd (its virtiofsd's).
func (s Share) QemuArgs(i int, fd string) []string {
	chr := fmt.Sprintf("crimux-fs%d", i)
	return []string{
		"-chardev", fmt.Sprintf("socket,id=%s,fd=%s", chr, fd),
		"-device", fmt.Sprintf("vhost-user-fs-pci,chardev=%s,id=%s-dev,tag=%s,queue-size=1024,%s", chr, chr, s.Tag, slot(i)),
	}
}
