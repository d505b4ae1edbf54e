package vmapi

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// A VM is named by an ID as CRI clients see it ("vm--<id>": the registry
// routes it to the VM runtime, which knows it by "<id>") or by its pod's
// namespace and name. An ID or pod of another runtime is a container pod:
// FailedPrecondition, saying so, rather than NotFound.

// vmRuntime is one VM runtime of the registry.
type vmRuntime struct {
	name string
	vms  vmtypes.Operator
	// ids shows the runtime's IDs as clients see them.
	ids idcodec.Codec
}

// target is a resolved VM.
type target struct {
	vmRuntime
	// id is the runtime's own ID of the VM's pod or container.
	id string
	// ref is the VM as the client named it, quoted, for messages.
	ref string
}

// wrap names the VM as the client did in an error of the runtime.
func (t target) wrap(err error) error { return fmt.Errorf("vm %s: %w", t.ref, err) }

// vmRuntimes are the registry's backends that run VMs: those with the VM
// operations ability (vmtypes.Operator).
func vmRuntimes(reg *registry.Registry) []vmRuntime {
	var out []vmRuntime
	for _, rt := range reg.Backends() {
		if vm, ok := vmRuntimeOf(rt); ok {
			out = append(out, vm)
		}
	}
	return out
}

func vmRuntimeOf(rt *registry.Runtime) (vmRuntime, bool) {
	vms, ok := registry.Ability[vmtypes.Operator](rt)
	if !ok {
		return vmRuntime{}, false
	}
	return vmRuntime{name: rt.Name, vms: vms, ids: idcodec.For(rt.Prefix)}, true
}

func resolve(ctx context.Context, reg *registry.Registry, ref *vmv1.VMRef) (target, error) {
	switch r := ref.GetRef().(type) {
	case *vmv1.VMRef_Id:
		return resolveID(ctx, reg, r.Id)
	case *vmv1.VMRef_Pod:
		return resolvePod(ctx, reg, r.Pod.GetNamespace(), r.Pod.GetName())
	}
	return target{}, errdefs.Invalid("vm", "must name a VM: a pod sandbox or container ID, or a pod namespace and name")
}

func resolveID(ctx context.Context, reg *registry.Registry, id string) (target, error) {
	if err := idcodec.Validate("vm.id", id); err != nil {
		return target{}, err
	}
	ref := strconv.Quote(id)
	rt := reg.ForID(id)
	if vm, ok := vmRuntimeOf(rt); ok {
		return target{vmRuntime: vm, id: vm.ids.Decode(id), ref: ref}, nil
	}
	known, err := knowsID(ctx, rt, id)
	switch {
	case err != nil:
		return target{}, fmt.Errorf("vm %s: not a VM's ID, and runtime %q could not say what it is: %w", ref, rt.Name, err)
	case known:
		return target{}, fmt.Errorf("vm %s: is a pod or container of runtime %q (type %s), not a VM: %w", ref, rt.Name, rt.Type, errdefs.ErrFailedPrecondition)
	}
	return target{}, fmt.Errorf("vm %s: no VM pod or container has this ID: %w", ref, errdefs.ErrNotFound)
}

// knowsID asks a (container) runtime whether id is one of its pods or
// containers.
func knowsID(ctx context.Context, rt *registry.Runtime, id string) (bool, error) {
	rs := rt.Backend.Runtime()
	if rs == nil {
		return false, nil
	}
	_, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err == nil {
		return true, nil
	} else if !errdefs.IsNotFound(err) {
		return false, err
	}
	_, err = rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err == nil {
		return true, nil
	} else if !errdefs.IsNotFound(err) {
		return false, err
	}
	return false, nil
}

func resolvePod(ctx context.Context, reg *registry.Registry, namespace, name string) (target, error) {
	if namespace == "" {
		return target{}, errdefs.Invalid("vm.pod.namespace", "must not be empty")
	}
	if name == "" {
		return target{}, errdefs.Invalid("vm.pod.name", "must not be empty")
	}
	ref := strconv.Quote(namespace + "/" + name)
	var found []candidate
	for _, rt := range vmRuntimes(reg) {
		vms, err := rt.vms.ListVMs(ctx)
		if err != nil {
			return target{}, fmt.Errorf("vm %s: list VMs of runtime %q: %w", ref, rt.name, err)
		}
		for _, v := range vms {
			if v.Namespace == namespace && v.Name == name {
				found = append(found, candidate{target{vmRuntime: rt, id: v.SandboxID, ref: ref}, v})
			}
		}
	}
	if len(found) > 0 {
		return pickPod(ref, found)
	}
	if rt, err := containerPodNamed(ctx, reg, namespace, name); err != nil {
		return target{}, fmt.Errorf("vm %s: %w", ref, err)
	} else if rt != nil {
		return target{}, fmt.Errorf("vm %s: is a pod of runtime %q (type %s), not a VM: %w", ref, rt.Name, rt.Type, errdefs.ErrFailedPrecondition)
	}
	return target{}, fmt.Errorf("vm %s: no VM pod has this namespace and name: %w", ref, errdefs.ErrNotFound)
}

type candidate struct {
	target
	info vmtypes.VMInfo
}

// pickPod chooses among the VM pods of one name (kubelet makes a new
// sandbox per attempt): the ready one, else the newest; refused if several
// are ready.
func pickPod(ref string, found []candidate) (target, error) {
	sort.SliceStable(found, func(i, j int) bool {
		ri, rj := found[i].info.PodState == runtimeapi.PodSandboxState_SANDBOX_READY, found[j].info.PodState == runtimeapi.PodSandboxState_SANDBOX_READY
		if ri != rj {
			return ri
		}
		return found[i].info.CreatedAt > found[j].info.CreatedAt
	})
	var ready []string
	for _, c := range found {
		if c.info.PodState == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready = append(ready, c.ids.Encode(c.id))
		}
	}
	if len(ready) > 1 {
		sort.Strings(ready)
		return target{}, fmt.Errorf("vm %s: %d ready VM pods have this namespace and name (%s); name one by ID: %w",
			ref, len(ready), strings.Join(ready, ", "), errdefs.ErrFailedPrecondition)
	}
	return found[0].target, nil
}

// containerPodNamed returns the non-VM runtime that has a pod of this
// namespace and name, nil if none has.
func containerPodNamed(ctx context.Context, reg *registry.Registry, namespace, name string) (*registry.Runtime, error) {
	for _, rt := range reg.Backends() {
		if _, ok := vmRuntimeOf(rt); ok || rt.Backend.Runtime() == nil {
			continue
		}
		resp, err := rt.Backend.Runtime().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return nil, fmt.Errorf("not a VM pod, and runtime %q could not list its pods: %w", rt.Name, err)
		}
		for _, p := range resp.GetItems() {
			if p.GetMetadata().GetNamespace() == namespace && p.GetMetadata().GetName() == name {
				return rt, nil
			}
		}
	}
	return nil, nil
}
