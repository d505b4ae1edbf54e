package crifields

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// securityFields are the pod's and the container's security contexts. A
// VM is isolated by its own kernel and by how qemu runs (its own uid, its
// cgroup: docs/security.md), not by a container's namespaces and
// filters, so most of what kubelet sends for a container's processes has
// nothing to act on; what has a VM meaning is the user its shares act as
// (converter/vm/sharerights.go). What would promise something false is
// refused: privileged, the node's namespaces, a read-only root.
var securityFields = merge(sandboxSecurityFields, containerSecurityFields, namespaceFields)

// sandboxSecurityFields are the pod's: kubelet derives them for the
// sandbox's own processes (a pause container's), of which a VM pod has
// none; the container's copy of the same settings is what counts.
var sandboxSecurityFields = Table{
	"runtime.v1.LinuxSandboxSecurityContext.namespace_options": nested,
	"runtime.v1.LinuxSandboxSecurityContext.selinux_options": ignored(sandboxProcesses + "; qemu is not given the pod's label " +
		"(it runs as the VM's own uid, in the VM's cgroup: docs/security.md)"),
	"runtime.v1.LinuxSandboxSecurityContext.run_as_user":                ignored(sandboxProcesses + "; the container's run_as_user, which kubelet derives from the same pod setting, is the user its shares act as"),
	"runtime.v1.LinuxSandboxSecurityContext.run_as_group":               ignored(sandboxProcesses + "; the container's run_as_group is the group its shares act as"),
	"runtime.v1.LinuxSandboxSecurityContext.readonly_rootfs":            ignored(sandboxProcesses),
	"runtime.v1.LinuxSandboxSecurityContext.supplemental_groups":        ignored(sandboxProcesses + "; the container's supplemental_groups are the groups its shares act with"),
	"runtime.v1.LinuxSandboxSecurityContext.supplemental_groups_policy": ignored(sandboxProcesses),
	"runtime.v1.LinuxSandboxSecurityContext.privileged": refused("kubelet sets it when the pod's container is privileged, and a VM cannot be: " +
		"the guest gets none of the host's devices or capabilities. Drop `privileged`; give the VM block devices (volumeDevices) it needs"),
	"runtime.v1.LinuxSandboxSecurityContext.seccomp": ignored("kubelet gives every sandbox RuntimeDefault, for the sandbox's own processes " +
		"(a pause container's), of which a VM pod has none"),
	"runtime.v1.LinuxSandboxSecurityContext.apparmor":             ignored(sandboxProcesses),
	"runtime.v1.LinuxSandboxSecurityContext.seccomp_profile_path": ignored("the deprecated form of seccomp, ignored as it is"),
}

const sandboxProcesses = "it applies to the sandbox's own processes (a pause container's), and a VM pod has none"

// containerSecurityFields are the container's: the guest's processes are
// the guest kernel's to confine, so only what virtiofsd does on the
// host for the guest takes them (the share rights).
var containerSecurityFields = Table{
	"runtime.v1.LinuxContainerSecurityContext.capabilities": mapped("what the VM's shares may do on the host: a root container's virtiofsd keeps only the capabilities " +
		"the container is given (CHOWN, FOWNER, MKNOD…; docs/storage.md); the guest's own processes have the guest kernel's"),
	"runtime.v1.LinuxContainerSecurityContext.privileged": refused("a VM cannot be privileged: the guest gets none of the host's devices or capabilities, " +
		"and its processes are confined by its own kernel. Drop `privileged`; give the VM block devices (volumeDevices) it needs"),
	"runtime.v1.LinuxContainerSecurityContext.namespace_options": nested,
	"runtime.v1.LinuxContainerSecurityContext.selinux_options": ignored("the guest's processes are labelled, if at all, by the guest's kernel; " +
		"qemu is not given the container's label (it runs as the VM's own uid, in the VM's cgroup: docs/security.md)"),
	"runtime.v1.LinuxContainerSecurityContext.run_as_user": mapped("the host user the VM's shares act as, whatever guest user asks (virtiofsd in a user namespace " +
		"whose root is that user); kubelet sets it from the image's numeric USER too. The guest's own users are the guest's"),
	"runtime.v1.LinuxContainerSecurityContext.run_as_group": mapped("the host group the VM's shares act as (with run_as_user)"),
	"runtime.v1.LinuxContainerSecurityContext.run_as_username": mapped("root is the one user name a VM image is sure to mean: the shares act as root; " +
		"another name, without run_as_user, is refused when the VM has shares (a VM image's users cannot be looked up)"),
	"runtime.v1.LinuxContainerSecurityContext.readonly_rootfs": refused("a VM writes its root disk (an overlay of its image's, or its root volume): " +
		"nothing would make its root read-only. Drop `readOnlyRootFilesystem`; a guest that wants a read-only root mounts it so itself"),
	"runtime.v1.LinuxContainerSecurityContext.supplemental_groups": mapped("the supplemental groups the VM's shares act with (an fsGroup's among them)"),
	"runtime.v1.LinuxContainerSecurityContext.supplemental_groups_policy": ignored("a VM image's /etc/group is never read: the shares act with exactly " +
		"supplemental_groups, as Strict would; Merge (the default) has nothing to merge"),
	"runtime.v1.LinuxContainerSecurityContext.no_new_privs": ignored("no process of the container's runs on the host to exec with it: " +
		"the guest's processes run on the guest's kernel (the restricted Pod Security profile sets it on every pod, so it is not refused)"),
	"runtime.v1.LinuxContainerSecurityContext.masked_paths": ignored("kubelet's defaults hide the host kernel's /proc entries from a container; " +
		"a guest's /proc is its own kernel's, with nothing of the host's in it"),
	"runtime.v1.LinuxContainerSecurityContext.readonly_paths": ignored("kubelet's defaults make the host kernel's /proc entries read-only in a container; " +
		"a guest's /proc is its own kernel's, with nothing of the host's in it"),
	"runtime.v1.LinuxContainerSecurityContext.seccomp": ignored("kubelet sets a profile on every container; the guest's processes make their " +
		"system calls to the guest's kernel, which no host filter sees, and qemu is not given the container's profile"),
	"runtime.v1.LinuxContainerSecurityContext.apparmor": ignored("kubelet sets a profile on every container; the guest's processes are the " +
		"guest kernel's, and qemu is not given the container's profile"),
	"runtime.v1.LinuxContainerSecurityContext.apparmor_profile":     ignored("the deprecated form of apparmor, ignored as it is"),
	"runtime.v1.LinuxContainerSecurityContext.seccomp_profile_path": ignored("the deprecated form of seccomp, ignored as it is"),
}

// namespaceFields are the pod's and the container's namespaces (one
// message for both). A VM has every namespace of its own, its kernel's:
// the pod's and the container's modes are what it has anyway, the node's
// it cannot share.
var namespaceFields = Table{
	"runtime.v1.NamespaceOption.network": refusedWhen(oneOf(runtimeapi.NamespaceMode_NODE),
		"host networking: a VM has its own kernel and cannot share the node's network stack (POD, kubelet's default, "+
			"puts the guest on the pod network)"),
	"runtime.v1.NamespaceOption.pid": refusedWhen(oneOf(runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_TARGET),
		"the guest's processes are in its own kernel, alone: they cannot see the node's (hostPID) nor join another container's "+
			"(CONTAINER and POD, kubelet's defaults, are what a VM has)"),
	"runtime.v1.NamespaceOption.ipc": refusedWhen(oneOf(runtimeapi.NamespaceMode_NODE),
		"the guest's IPC is its own kernel's: it cannot share the node's (hostIPC); POD, kubelet's default, is what a VM has"),
	"runtime.v1.NamespaceOption.target_id": ignored("it names the container of TARGET mode, which is refused (pid)"),
	"runtime.v1.NamespaceOption.userns_options": ignored("a guest's users are never host users: qemu runs as the VM's own uid " +
		"(or libvirt's qemu user), never root, whether the pod asks for host users (NODE, the default) or not (POD); " +
		"the VM's shares act as its container's security context says, and ID-mapped mounts are refused (Mount.uidMappings)"),
}
