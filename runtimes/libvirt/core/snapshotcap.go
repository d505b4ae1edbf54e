package core

// DefaultMaxSnapshotsPerVM caps a VM's snapshots when
// Options.MaxSnapshotsPerVM is 0 (config's default too). It is here, and
// not only in vmops (which enforces the cap on the VM API), because the
// cap is core's option, and the root disks' room (rootdisk), beside
// vmops, enforces it on a root volume's disk too.
const DefaultMaxSnapshotsPerVM = 8

// MaxSnapshots is the cap of a VM's snapshots: the one a reload set,
// else Opts.MaxSnapshotsPerVM, 0 being DefaultMaxSnapshotsPerVM.
func (r *Runtime) MaxSnapshots() int {
	if n := r.snapshotCap.Load(); n > 0 {
		return int(n)
	}
	if n := r.Opts.MaxSnapshotsPerVM; n > 0 {
		return n
	}
	return DefaultMaxSnapshotsPerVM
}

// SetMaxSnapshots makes n the cap of every VM's snapshots from now on (0
// is DefaultMaxSnapshotsPerVM): the next snapshot taken, and the next
// root volume examined, count against it. Snapshots beyond a lowered cap
// are kept; no more is taken until enough are deleted.
func (r *Runtime) SetMaxSnapshots(n int) {
	if n <= 0 {
		n = DefaultMaxSnapshotsPerVM
	}
	r.snapshotCap.Store(int64(n))
}
