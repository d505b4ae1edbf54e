// Package rootvol keeps a VM's root disk on a volume (docs/storage.md
// "Durable VMs"): a block device, or a file in a filesystem volume's
// root, that outlives the pod, unlike the overlay in crimux's state dir.
//
// What a volume holds is read from the volume itself (Examine), as
// strictly as an image's disk: nothing (its first MiB zero, or no disk
// file): the image is imported into it (Import); a disk of the format the
// pod asks for: it boots as it is, never written again; an import crimux
// began and did not finish: imported again; anything else is refused and
// left untouched. A new VM is refused a qcow2 disk holding more internal
// snapshots than a VM may have (MaxSnapshots): each would be given to its
// libvirt domain.
//
// crimux reads and writes a filesystem volume's disk file through a
// descriptor, opened beneath the volume's directory (tenantfs): a link
// there is not followed, and nothing but a regular file is opened.
//
// An import into a qcow2 writes the header first, so crimux marks it as
// under way in the header itself, with a compatible-feature bit of its
// own (bit 63: qemu ignores and keeps unknown compatible features) set
// before the data is copied and cleared once it all is: a crimux, a node
// or a copy that dies half way leaves a disk that says so. A raw import
// copies everything but the first MiB, then the first MiB: a disk cut
// short still reads as empty.
//
// qemu reaches the disk through the VM's own directory, never the
// volume's host path (kubelet's directories are root's): a device node
// of the block device's number, or a bind mount of the disk file, given
// to the VM's identity alone (Attach, Release).
package rootvol
