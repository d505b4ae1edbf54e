package crifields

// resourceFields are a container's Linux resources, at CreateContainer
// and at UpdateContainerResources (one message for both): the VM's size
// and its cgroup. kubelet fills most of them on every container, so none
// is refused for being set.
var resourceFields = Table{
	"runtime.v1.LinuxContainerResources.cpu_period": mapped("with cpu_quota, the VM's vCPUs (quota/period, rounded up) and its cgroup's CPU limit"),
	"runtime.v1.LinuxContainerResources.cpu_quota": mapped("with cpu_period, the VM's vCPUs (quota/period, rounded up; hot-plugged on update) " +
		"and its cgroup's CPU limit"),
	"runtime.v1.LinuxContainerResources.cpu_shares": mapped("without a quota, the VM's vCPUs (shares/1024, rounded up); its cgroup's CPU weight"),
	"runtime.v1.LinuxContainerResources.memory_limit_in_bytes": mapped("the guest's RAM (virtio-mem plugged or unplugged on update), and its cgroup's " +
		"memory limit with qemu's overhead (libvirt.memory_overhead_mib); a VM must have one"),
	"runtime.v1.LinuxContainerResources.oom_score_adj": honoured("qemu's OOM score adjustment, set as crimux places qemu in the VM's cgroup, " +
		"before it runs: the node's OOM killer weighs the VM as kubelet's QoS class asks (not changed by an update: kubelet never changes it; " +
		"a negative one needs CAP_SYS_RESOURCE, without which qemu keeps its own and crimux logs why)"),
	"runtime.v1.LinuxContainerResources.cpuset_cpus": honoured("the VM's cgroup's cpuset: every thread of the VM (its vCPUs, qemu's own, " +
		"virtiofsd) runs on the CPUs kubelet's CPU manager gave the container, exclusive ones under its static policy; an update " +
		"(kubelet sends the cpuset alone) moves them"),
	"runtime.v1.LinuxContainerResources.cpuset_mems": honoured("the VM's cgroup's cpuset.mems: the guest's RAM is allocated from the NUMA nodes " +
		"kubelet's memory manager chose"),
	"runtime.v1.LinuxContainerResources.hugepage_limits": honoured("a limit on one page size (hugepages-2Mi, hugepages-1Gi) backs the guest's " +
		"RAM with huge pages: the RAM is that limit, preallocated as qemu starts, and the memory limit is left to qemu's own; too few free " +
		"pages, or no hugetlbfs of that size, is refused at CreateContainer; limits on two sizes are refused; such a VM's RAM is not resized"),
	"runtime.v1.LinuxContainerResources.unified": ignored("kubelet's raw cgroup v2 settings (memory.high under MemoryQoS, memory.swap.max " +
		"for its swap behaviour) for a container's cgroup; the VM's cgroup gets crimux's own limits, from the fields above"),
	"runtime.v1.LinuxContainerResources.memory_swap_limit_in_bytes": ignored("kubelet's swap limit for a container's cgroup (on cgroup v1); " +
		"the VM's cgroup gets crimux's own limits, from the fields above"),
}
