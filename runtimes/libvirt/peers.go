package libvirt

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// criNamespace is the containerd namespace of its CRI plugin's pods.
const criNamespace = "k8s.io"

// containerdSandboxes lists containerd's CRI pods, whose addresses CNI
// GC (runtimes/libvirt/gc) must keep: they share the node's network with
// the VM pods. Two sources, joined: the sandbox metadata store, which
// holds a pod from before its CNI ADD until after its removal
// (containerd 2.x), and the containers, among them each pod's pause
// container, named by the pod's ID (what a containerd without that store
// has). Extra IDs (app containers) name no attachment and cost nothing.
func containerdSandboxes(endpoint string) (func(context.Context) ([]string, error), func() error, error) {
	c, err := client.New(strings.TrimPrefix(endpoint, "unix://"))
	if err != nil {
		return nil, nil, fmt.Errorf("containerd client for the pod network's GC: %w", err)
	}
	list := func(ctx context.Context) ([]string, error) {
		ctx = namespaces.WithNamespace(ctx, criNamespace)
		sbs, err := c.SandboxStore().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("containerd %s: list sandboxes: %w", endpoint, err)
		}
		ctrs, err := c.ContainerService().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("containerd %s: list containers: %w", endpoint, err)
		}
		ids := make([]string, 0, len(sbs)+len(ctrs))
		for _, sb := range sbs {
			ids = append(ids, sb.ID)
		}
		for _, ctr := range ctrs {
			ids = append(ids, ctr.ID)
		}
		return ids, nil
	}
	return list, c.Close, nil
}
