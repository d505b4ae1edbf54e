package crifields

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// mountFields are a container's mounts: each host directory becomes a
// virtio-fs share the guest mounts (converter/vm/storage.go). kubelet's
// own single-file mounts (/etc/hosts, the termination log), the service
// account token and the cloud-init volume do not reach the guest.
var mountFields = Table{
	"runtime.v1.ContainerConfig.mounts": nested,
	"runtime.v1.Mount.container_path": mapped("where the guest mounts the share (cloud-init's vendor-data mounts it on every boot); " +
		"the share's virtio-fs tag is derived from it"),
	"runtime.v1.Mount.host_path": mapped("the directory a virtiofsd of the VM's own serves to the guest; a file other than kubelet's own " +
		"(a subPath of a file) is refused: a share is a directory"),
	"runtime.v1.Mount.readonly": honoured("the directory is bound read-only for the virtiofsd, and the guest mounts it read-only"),
	"runtime.v1.Mount.selinux_relabel": ignored("the share is served by the VM's virtiofsd, not mounted in a container's SELinux context: " +
		"nothing is relabelled"),
	"runtime.v1.Mount.propagation": refusedWhen(oneOf(runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL),
		"a guest's mounts cannot propagate back to the host; use PROPAGATION_PRIVATE or PROPAGATION_HOST_TO_CONTAINER "+
			"(both accepted: the virtiofsd serves the directory from a mount namespace that is a slave of the host's)"),
	"runtime.v1.Mount.uidMappings": refused("a share acts as the container's user (run_as_user) and cannot also map user IDs (an ID-mapped mount " +
		"of a user-namespaced pod); run the VM pod with host users"),
	"runtime.v1.Mount.gidMappings": refused("a share acts as the container's group (run_as_group) and cannot also map group IDs (an ID-mapped mount " +
		"of a user-namespaced pod); run the VM pod with host users"),
	"runtime.v1.Mount.recursive_read_only": honoured("a read-only share is a non-recursive read-only bind: mounts below the directory are not shared at all, " +
		"so nothing under it is writable"),
	"runtime.v1.Mount.image": refused("an image volume is an image's files mounted into a container; a VM is given directories and block devices. " +
		"Put the files in a volume the VM can share (an emptyDir filled by an init step, a PVC)"),
	"runtime.v1.Mount.image_sub_path": refused("a sub path of an image volume; image volumes are refused (Mount.image)"),
	"runtime.v1.Mount.mount_options": refused("the guest mounts the share itself, and its root can mount it again without them: " +
		"noexec, nodev or nosuid would promise what the host cannot hold the guest to. Set them in the guest's own mount (cloud-init user-data)"),
}
