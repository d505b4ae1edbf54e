package main

import (
	"os/exec"
	"strings"
	"testing"
)

// crimux's binary holds no Kubernetes API group but core/v1, the node
// agent's: client-go's typed clients register all of them when crimux
// starts (k8s.io/client-go/kubernetes/scheme, 55 packages of k8s.io/api),
// which was 22 MB of the binary and 10 MiB of an idle crimux's memory.
// nodeagent/coreclient.go is the agent's client instead.
func TestBinaryHasNoKubernetesAPIGroupsButCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/client-go/kubernetes") ||
			(strings.HasPrefix(dep, "k8s.io/api/") && dep != "k8s.io/api/core/v1") {
			t.Errorf("crimux depends on %s", dep)
		}
	}
}
