package crifields

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// containerFields are the container's config (CreateContainer): the VM
// itself. Its mounts are in mounts.go, its security context in
// security.go, its resources in resources.go.
var containerFields = Table{
	"runtime.v1.ContainerConfig.metadata": nested,
	"runtime.v1.ContainerMetadata.name":   honoured("reported in the container's status and lists"),
	"runtime.v1.ContainerMetadata.attempt": honoured("reported in the container's status; attempt N+1 of the same image boots the pod's root disk " +
		"that attempt N left (docs/storage.md)"),

	"runtime.v1.ContainerConfig.image":          nested,
	"runtime.v1.ImageSpec.image":                honoured("the VM image booted: its disk (an overlay of it is the VM's root disk), or its kernel and initrd"),
	"runtime.v1.ImageSpec.annotations":          ignored("hints for choosing among an image's platforms when it is pulled; the VM boots the image `image` names"),
	"runtime.v1.ImageSpec.user_specified_image": honoured("reported back in the container's status as given"),
	"runtime.v1.ImageSpec.runtime_handler": ignored("crimux's image service pulls for both runtimes into one store; " +
		"the VM reads its image from there whatever handler pulled it"),
	"runtime.v1.ImageSpec.image_ref": ignored("the digest of an image volume's image; image volumes are refused (Mount.image)"),

	"runtime.v1.ContainerConfig.command": refused("a VM boots its image: its own init runs, and no command can replace it. " +
		"Leave `command` and `args` empty; give the kernel arguments with the `crimux.io/kernel-args` annotation, " +
		"or run commands at boot with cloud-init user-data (`crimux.io/cloud-init-user-data`)"),
	"runtime.v1.ContainerConfig.args": refused("a VM boots its image: its own init runs, and takes no arguments from the container. " +
		"Leave `command` and `args` empty; give the kernel arguments with the `crimux.io/kernel-args` annotation, " +
		"or run commands at boot with cloud-init user-data (`crimux.io/cloud-init-user-data`)"),
	"runtime.v1.ContainerConfig.working_dir": refused("a VM has no process of the container's to start in a directory: its image boots. " +
		"Leave `workingDir` empty; a command of yours in the guest can cd itself (cloud-init user-data, or exec)"),
	"runtime.v1.ContainerConfig.envs": ignored("no process of the container's runs in the guest to take an environment; " +
		"kubelet gives every container its services' variables (KUBERNETES_SERVICE_HOST…), so they are not refused. " +
		"Configure the guest with cloud-init user-data"),

	"runtime.v1.ContainerConfig.devices": nested,
	"runtime.v1.Device.container_path": mapped("the virtio-blk disk's serial, derived from the path: the guest finds the disk " +
		"as /dev/disk/by-id/virtio-<serial> (docs/storage.md)"),
	"runtime.v1.Device.host_path":   mapped("the host block device given to the guest as a virtio-blk disk; anything else than a block device is refused"),
	"runtime.v1.Device.permissions": honoured("without `w`, the guest's disk is read-only"),

	"runtime.v1.ContainerConfig.labels": honoured("kept, reported in the container's status and lists, matched by their filters"),
	"runtime.v1.ContainerConfig.annotations": honoured("kept and reported; the `crimux.io/` ones configure the VM (docs/vm-pods.md, docs/storage.md), " +
		"over the pod's"),
	"runtime.v1.ContainerConfig.log_path": honoured("the VM's serial console, written as CRI log lines (kubectl logs)"),

	"runtime.v1.ContainerConfig.stdin": ignored("the VM's serial console is always there to attach to, read and write (crictl attach, kubectl attach); " +
		"a container's stdin has no VM counterpart"),
	"runtime.v1.ContainerConfig.stdin_once": ignored("the VM's serial console stays open across attaches; " +
		"a container's stdin has no VM counterpart"),
	"runtime.v1.ContainerConfig.tty": ignored("the VM's serial console is the guest's terminal whatever the flag says"),

	"runtime.v1.ContainerConfig.linux":                 nested,
	"runtime.v1.LinuxContainerConfig.resources":        nested,
	"runtime.v1.LinuxContainerConfig.security_context": nested,
	"runtime.v1.ContainerConfig.windows":               ignored("Windows containers' config: kubelet sets it on Windows nodes only"),

	"runtime.v1.ContainerConfig.CDI_devices": refused("a CDI device (a GPU, say) is edited into a container's OCI spec, which a VM does not have: " +
		"it would reach no guest. Give the VM a block device (volumeDevices) instead; PCI passthrough is not supported"),
	"runtime.v1.ContainerConfig.stop_signal": refusedWhen(
		noneOf(runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, runtimeapi.Signal_SIGNAL_SIGTERM, runtimeapi.Signal_SIGNAL_SIGKILL),
		"a VM stops one of two ways. Unset or SIGTERM: an ACPI power-off (the guest's SIGTERM), the VM destroyed when the grace period ends; "+
			"SIGKILL: the VM destroyed at once, with no power-off and no grace (exit 137). No other signal reaches a guest. "+
			"Leave `lifecycle.stopSignal` unset, or set SIGTERM or SIGKILL"),
}
