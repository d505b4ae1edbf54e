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
	"runtime.v1.LinuxContainerResources.cpuset_cpus": ignored("kubelet's CPU manager sets it on every container under its static policy " +
		"(the shared pool when no CPU is exclusive), so it is not refused; the VM's threads are not pinned yet (issue 40, item 3)"),
	"runtime.v1.LinuxContainerResources.cpuset_mems": ignored("kubelet's CPU and memory managers set it; the VM's memory is not bound " +
		"to NUMA nodes yet (issue 40, item 3)"),
	"runtime.v1.LinuxContainerResources.hugepage_limits": ignored("kubelet sends a limit for every huge page size of the node, 0 unless the pod " +
		"asks for some, so it is not refused; the guest's RAM is not backed by huge pages yet (issue 40, item 4)"),
	"runtime.v1.LinuxContainerResources.unified": ignored("kubelet's raw cgroup v2 settings (memory.high under MemoryQoS, memory.swap.max " +
		"for its swap behaviour) for a container's cgroup; the VM's cgroup gets crimux's own limits, from the fields above"),
	"runtime.v1.LinuxContainerResources.memory_swap_limit_in_bytes": ignored("kubelet's swap limit for a container's cgroup (on cgroup v1); " +
		"the VM's cgroup gets crimux's own limits, from the fields above"),
}
