// Package cgroup holds the node's cgroup mechanics that every runtime of
// crimux uses: discovering the mounted hierarchies (v1, hybrid, unified),
// expanding a pod's cgroup parent (cgroupfs path or systemd slice) into
// its path in each, and making, limiting, measuring and removing a leaf
// under it. Who goes into a leaf is its caller's business: the VM runtime
// places qemu there (runtimes/libvirt/placer), the containerd runtime's
// sweeper finds the leaves runc left (runtimes/containerd).
//
// # Code
//
// Spec.Paths and Spec.Values are pure: the leaf's path relative to every
// root (a systemd slice parent is expanded as systemd lays it out) and the
// list of (hierarchy, file, value) the limits write, for a Layout read from
// /proc/self/mountinfo. One step applies them. containerd/cgroups/v3 is
// used where it fits: cgroup1 for making the leaf in the v1 hierarchies (a
// custom Hierarchy of one subsystem per mount, so any grouping of
// controllers works; its cpuset subsystem copies cpus and mems down, without
// which no task could join) and for cgroup.procs writes (retrying EINVAL on
// a task being born); cgroup2.NewManager for the unified leaf (on a pure v2
// host it enables cpu and memory in every ancestor's subtree_control); its
// shares→weight conversion (runc's) and cpu.max formatting. Plain file
// operations elsewhere: the limit values themselves (so Values is exactly
// what is written; failed writes are retried once after the others, which
// settles the cfs period/quota ordering runc handles by hand), Remove (rmdir
// while EBUSY, up to 5 s for exiting tasks; the libraries' Delete neither
// waits nor treats a missing leaf as done), and Stats (four small files,
// cadvisor's working-set formula; the libraries parse every stat file).
//
// On a host where systemd is init on the unified hierarchy alone
// (Layout.Systemd), a leaf under a slice parent (kubelet's systemd driver)
// is a transient scope, <Name>.scope, that Place starts through systemd
// with the limits as unit properties (scope.go): systemd owns the slices'
// subtree_control and took the controllers away from a plain directory at
// the next daemon-reload.
//
// The leaf's name is its only identity stamp (cgroupfs takes no files of
// ours): Spec.Name must start with "crimux-", which is how a later
// List/Orphans will find crimux's leaves. Parents are created when missing
// but never removed.
package cgroup
