package cri

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func isUnavailable(err error) bool { return errdefs.IsUnavailable(err) }

// The matchers below apply CRI list filters to cached items, the way
// containerd applies them: an ID filter matches a full ID or a prefix of
// one, state and sandbox filters match exactly, every label of the
// selector must be present with its value.

func matchSandbox(f *runtimeapi.PodSandboxFilter, sb *runtimeapi.PodSandbox) bool {
	if f == nil {
		return true
	}
	if f.Id != "" && !strings.HasPrefix(sb.Id, f.Id) {
		return false
	}
	if f.State != nil && f.State.State != sb.State {
		return false
	}
	return matchLabels(f.LabelSelector, sb.Labels)
}

func matchContainer(f *runtimeapi.ContainerFilter, c *runtimeapi.Container) bool {
	if f == nil {
		return true
	}
	if f.Id != "" && !strings.HasPrefix(c.Id, f.Id) {
		return false
	}
	if f.PodSandboxId != "" && !strings.HasPrefix(c.PodSandboxId, f.PodSandboxId) {
		return false
	}
	if f.State != nil && f.State.State != c.State {
		return false
	}
	return matchLabels(f.LabelSelector, c.Labels)
}

func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// sandboxFilterEmpty says whether a list may refresh the cache.
func sandboxFilterEmpty(f *runtimeapi.PodSandboxFilter) bool {
	return f == nil || (f.Id == "" && f.State == nil && len(f.LabelSelector) == 0)
}

func containerFilterEmpty(f *runtimeapi.ContainerFilter) bool {
	return f == nil || (f.Id == "" && f.PodSandboxId == "" && f.State == nil && len(f.LabelSelector) == 0)
}
