// Package rootdisk owns a VM's root disk, whichever way it comes: the
// pod's overlay over its image's disk (pod_disk.go), made at
// CreateContainer, booted again by the pod's next VM with its snapshots,
// or a volume of the pod's own (a durable VM: make_volume.go,
// volume.go), claimed so that no two VMs of the node write it, imported
// into on first use, bound into the VM's directory and its snapshots
// given to the new domain. Before every start of a VM's qemu the disk is
// checked to be the one crimux made (check.go). The volume's low-level
// part (examine, import, attach, release) is runtimes/libvirt/rootvol's.
//
// The room is wired by runtimes/libvirt: core asks it before a start
// (core.RootDisks), the CRI face at CreateContainer (criservice.RootDisks),
// a live migration of a durable VM (migrate.RootVolumes).
package rootdisk
