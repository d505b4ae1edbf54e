// Package crifilter applies CRI list filters the way containerd does: an
// ID filter matches a full ID or a prefix of one, state and sandbox
// filters match exactly, and every label of a selector must be present
// with its value. The CRI server uses it on cached lists, the VM runtime
// on its store.
package crifilter

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandbox reports whether sb passes f (a nil filter passes everything).
func Sandbox(f *runtimeapi.PodSandboxFilter, sb *runtimeapi.PodSandbox) bool {
	if f == nil {
		return true
	}
	if f.Id != "" && !strings.HasPrefix(sb.Id, f.Id) {
		return false
	}
	if f.State != nil && f.State.State != sb.State {
		return false
	}
	return Labels(f.LabelSelector, sb.Labels)
}

// Container reports whether c passes f.
func Container(f *runtimeapi.ContainerFilter, c *runtimeapi.Container) bool {
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
	return Labels(f.LabelSelector, c.Labels)
}

// Labels reports whether labels has every key of selector with its value.
func Labels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
