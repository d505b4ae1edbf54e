package cri

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/internal/errdefs"
)

func isUnavailable(err error) bool { return errdefs.IsUnavailable(err) }

func matchSandbox(f *runtimeapi.PodSandboxFilter, sb *runtimeapi.PodSandbox) bool {
	return crifilter.Sandbox(f, sb)
}

func matchContainer(f *runtimeapi.ContainerFilter, c *runtimeapi.Container) bool {
	return crifilter.Container(f, c)
}

// sandboxFilterEmpty says whether a list may refresh the cache.
func sandboxFilterEmpty(f *runtimeapi.PodSandboxFilter) bool {
	return f == nil || (f.Id == "" && f.State == nil && len(f.LabelSelector) == 0)
}

func containerFilterEmpty(f *runtimeapi.ContainerFilter) bool {
	return f == nil || (f.Id == "" && f.PodSandboxId == "" && f.State == nil && len(f.LabelSelector) == 0)
}
