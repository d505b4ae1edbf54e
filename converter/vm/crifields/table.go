package crifields

import (
	"maps"

	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Table is the decisions, by the field's fully-qualified proto name
// ("runtime.v1.ContainerConfig.command"). A field of a message used in
// several places (LinuxContainerResources, NamespaceOption) has one
// decision for all of them; where the place matters, the field that holds
// the message decides it as a whole (LinuxPodSandboxConfig.overhead is
// ignored, ContainerConfig.linux is nested).
type Table map[protoreflect.FullName]Decision

// Roots are the requests a VM pod's fields arrive in: everything the
// table decides is reached from them.
func Roots() []protoreflect.MessageDescriptor {
	return []protoreflect.MessageDescriptor{
		(&runtimeapi.RunPodSandboxRequest{}).ProtoReflect().Descriptor(),
		(&runtimeapi.CreateContainerRequest{}).ProtoReflect().Descriptor(),
		(&runtimeapi.UpdateContainerResourcesRequest{}).ProtoReflect().Descriptor(),
		(&runtimeapi.UpdatePodSandboxResourcesRequest{}).ProtoReflect().Descriptor(),
	}
}

// decisions is the VM runtime's table, gathered from one file per family
// of messages.
var decisions = merge(requestFields, podFields, containerFields, mountFields, securityFields, resourceFields)

// Decisions is a copy of the VM runtime's table.
func Decisions() Table { return maps.Clone(decisions) }

func merge(parts ...Table) Table {
	out := Table{}
	for _, p := range parts {
		for name, d := range p {
			if _, dup := out[name]; dup {
				panic("crifields: two decisions for " + name)
			}
			out[name] = d
		}
	}
	return out
}

// requestFields are the requests' own fields.
var requestFields = Table{
	"runtime.v1.RunPodSandboxRequest.config":          nested,
	"runtime.v1.RunPodSandboxRequest.runtime_handler": honoured("picks the VM runtime (the handler `vm`); recorded and reported in the pod's status"),

	"runtime.v1.CreateContainerRequest.pod_sandbox_id": honoured("the VM pod the VM belongs to; a VM pod has one live container, the VM"),
	"runtime.v1.CreateContainerRequest.config":         nested,
	"runtime.v1.CreateContainerRequest.sandbox_config": ignored("the VM is made from the pod's config as RunPodSandbox recorded (and checked) it, not from this copy"),

	"runtime.v1.UpdateContainerResourcesRequest.container_id": honoured("the VM to resize"),
	"runtime.v1.UpdateContainerResourcesRequest.linux":        nested,
	"runtime.v1.UpdateContainerResourcesRequest.windows":      ignored("Windows containers' resources: kubelet sets them on Windows nodes only"),
	"runtime.v1.UpdateContainerResourcesRequest.annotations":  ignored("a VM's annotations are read when it is created; an update's carry nothing for it"),

	"runtime.v1.UpdatePodSandboxResourcesRequest.pod_sandbox_id": honoured("the VM pod; it must exist"),
	"runtime.v1.UpdatePodSandboxResourcesRequest.overhead": ignored("kubelet resizes the pod's cgroup itself; the VM follows its container's resources " +
		"(UpdateContainerResources), and qemu's own overhead is libvirt.memory_overhead_mib"),
	"runtime.v1.UpdatePodSandboxResourcesRequest.resources": ignored("kubelet resizes the pod's cgroup itself; the VM follows its container's resources (UpdateContainerResources)"),
}
