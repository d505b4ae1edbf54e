// Package instant starts VM pods from booted templates.
//
// A template is an image booted once in a shape (vCPUs, memory, the
// accelerator) with a neutral identity, its guest settled (cloud-init
// done, the VM generation ID driver loaded, caches dropped), then saved by
// libvirt: its memory and device state in one save image, its disk's
// writes in one overlay. Maker makes them: in a VM of no pod's (a domain
// named template.Domain(key), its own uid, a cgroup under
// Maker.Parent, a tap alone in a namespace of its own), then its files
// become root's alone (0600 under a 0700 directory): no qemu ever opens
// them again.
//
// A clone is a pod's VM restored from its template: a copy of the
// template's overlay as the pod's root disk, a domain of its own (the
// template's saved XML with its name, UUID, files and identity:
// converter/vm.CloneXML), and the save image fed to libvirt through a
// FIFO with the clone's header (saveimage.StartFeed): qemu, running as
// the pod's uid, gets an fd libvirtd opened, never a path. Before
// StartContainer returns, the clone becomes itself through its guest
// agent (identity.go): the clock set, host entropy mixed in and the RNG
// reseeded (libvirt gives every restore a new VM generation ID too), its
// NIC given the pod's MAC and addresses, its hostname, machine ID and SSH
// host keys new; cloud-init's per-instance stages for the pod's instance
// ID (its user-data, its SSH keys) run in the background.
//
// A template serves the pods of one namespace (its key and its meta name
// it) unless the operator shares templates across namespaces: clones of
// one template share what its boot fixed (boot ID, kernel layout and
// boot-time secrets, its daemons' canaries). It is used only if its meta
// is the request's in full. No pod is charged for a template's VM, so the
// Maker bounds them: MaxMaking at once on the node (no queue), MaxKept on
// disk (kept.go), a failed one made again only after RetryAfter, each VM
// limited to CPUMillis of CPU.
//
// Room is what the rest of the runtime asks of templates: the CRI face
// plans a pod's VM as a clone, or has it boot and say why, and starts it
// (pods.go, through criservice.Clones); the VM API lists, warms and
// removes templates (templates.go). While a template's VM is made, the
// Maker knows it (vms.go): its uid is held from every pod, and Placement
// answers the placement server about it as the core does about a pod's.
package instant
