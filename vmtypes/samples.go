package vmtypes

// Sampler is a backend that reports each of its VMs' figures for metrics
// (crimux_vm_*), read at every scrape.
type Sampler interface {
	VMSamples() ([]VMSample, error)
}

// VMSample is one VM's figures, named by its pod's namespace and name and
// its container's name (not their IDs), as Kubernetes users know them.
type VMSample struct {
	Namespace, Pod, Container string
	// PowerState is its domain's state: running, paused, shutdown,
	// hibernate, not_running or unknown.
	PowerState string
	// CPUSeconds is the CPU time of its cgroup (qemu and every thread).
	CPUSeconds float64
	// MemoryBytes is its cgroup's working set (the guest's RAM it
	// touched and qemu's own); GuestMemoryBytes what its guest reports in
	// use (virtio-balloon), 0 when it reports nothing.
	MemoryBytes, GuestMemoryBytes uint64
	// What it read and wrote on its disks and received and sent on its
	// NICs since its qemu started.
	BlockReadBytes, BlockWriteBytes, NetReceiveBytes, NetSendBytes uint64
	// Running: its qemu runs (the figures above are its own; zero
	// otherwise).
	Running bool
}
