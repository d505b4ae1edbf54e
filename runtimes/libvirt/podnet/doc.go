// Package podnet gives a VM pod its pod network, the way containerd gives
// one to a container pod — the node's CNI configuration, the same plugins,
// the same IPAM — except that the pod IP ends up owned by the guest.
//
// For each VM pod, crimux (root, in the host's namespaces):
//
//  1. creates a network namespace, bind-mounted at
//     <netns dir>/<instance>_<sandbox ID> (the file name carries crimux's
//     instance identity, so the collector knows its own namespaces from
//     anyone else's); the directory is a shared mount point, as iproute2
//     and containerd make theirs, so that unmounting a namespace also
//     unmounts the copies held by mount namespaces cloned meanwhile
//     (libvirt starts each qemu in a private one) and the namespace is
//     really freed;
//  2. runs CNI ADD in it (libcni; the first config file of the conf dir,
//     as containerd picks; port mappings through the portMappings
//     capability, the pod's bandwidth annotations through the bandwidth
//     one) and keeps the exact network config it used, so DEL runs with
//     it;
//  3. inside the namespace, turns the CNI interface (eth0) into a bridge
//     port: the guest takes eth0's MAC address and IP, eth0 gets a new
//     MAC and no address, and a persistent tap device joins eth0 on a
//     bridge (KubeVirt's bridge binding);
//  4. serves DHCP on that bridge, to the guest's MAC only, handing out the
//     pod's IPv4 address, gateway, routes, MTU, DNS servers and search
//     domains from the pod's config, with an infinite lease; and for the
//     pod's IPv6 address, router advertisements and a stateful DHCPv6
//     server on the tap itself (guest6.go), the pod's namespace being the
//     guest's IPv6 router towards the CNI gateway (wire6.go). Every
//     address of the CNI result is kept (address.go): dual stack and
//     IPv6-only pods alike.
//
// How qemu gets the tap although libvirtd and qemu live in the host's
// network namespace: crimux opens the tap itself — /dev/net/tun and
// TUNSETIFF from a thread inside the pod's namespace, which binds the file
// to the tap of that namespace for good — and hands the open file to the
// VM's emulator wrapper over the placement socket (SCM_RIGHTS) together
// with the qemu arguments that use it (`-netdev tap,fd=N` and a
// virtio-net device at a fixed PCI slot). The wrapper appends them to
// qemu's command line before exec, on every qemu process libvirt starts
// (start, snapshot revert, managed-save restore), so the guest keeps the
// same NIC throughout. Virtlet's tapmanager and vmwrapper passed tap fds
// the same way. The domain XML holds no <interface>: libvirt never
// touches the pod network, and nothing in the host namespace changes.
//
// Teardown runs CNI DEL with the kept config, then unmounts and removes
// the namespace (with it go the bridge and the tap). Every step is
// idempotent; a caller records the attachment before creating anything
// and forgets it only after Teardown succeeded, retrying until then.
//
// With a network config at CNI 1.1 or later, Status is the network's
// CNI STATUS (may new pods join?) and GC its CNI GC, naming every
// attachment that lives so the plugins drop the rest (cni11.go); an ADD
// or DEL in flight is never left off that list (inflight.go).
package podnet
