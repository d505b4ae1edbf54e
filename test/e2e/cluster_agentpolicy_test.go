package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentManifests are what an operator applies for the node agent
// (docs/node.md, "On a node of a cluster": the node agent), applied by the test as shipped.
var agentManifests = []string{
	"systemd/crimux-node-agent-rbac.yaml",
	"systemd/crimux-node-agent-policy.yaml",
}

// agentPolicy is the name of the admission policy on pods, which its
// refusals carry.
const agentPolicy = "crimux-node-agent-pods"

// elsewhereNode is a node the agent's credentials are not for; no kubelet
// runs as it, so its pods stay Pending.
const elsewhereNode = "crimux-e2e-elsewhere"

// agentPod is a pod bound to a node by name, with a user's request
// annotation. No kubelet runs in this test: admission alone is under test.
const agentPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: ` + clusterNamespace + `
  labels: {app: agent-policy}
  annotations:
    ` + annPowerState + `: Running
spec:
  nodeName: %s
  containers:
  - name: c
    image: ` + kubeletCtrImage + `
`

// TestClusterNodeAgentCredentialsAreNarrow (make e2e-cluster): with the
// node agent's own credentials (the test bed's client certificate for
// crimux-node-agent:<node> in crimux:node-agents) and its manifests applied
// as shipped, the agent writes its result annotations, and events its node
// reports, on pods bound to its node, and nothing else: not a pod's image
// (on its node or another), not a pod on another node, not a label, not a
// user's request annotation, not another annotation, not an event in
// another node's name. Every one of those its RBAC alone permits. Users
// outside the agents' group are not affected.
func TestClusterNodeAgentCredentialsAreNarrow(t *testing.T) {
	k8s := k8sDir(t)
	clusterNamespaceFor(t, k8s)
	for _, m := range agentManifests {
		kubectl(t, k8s, "apply", "-f", filepath.Join(repoRoot(), m))
	}
	own := createAgentPod(t, k8s, "agent-own", kubeletNode)
	other := createAgentPod(t, k8s, "agent-other", elsewhereNode)
	waitPolicyInForce(t, k8s, own)

	image := `{"spec":{"containers":[{"name":"c","image":"127.0.0.1:5117/hijacked:latest"}]}}`
	for _, c := range []struct {
		name, pod, patchType, patch string
	}{
		{"image of a pod on its node", own, "strategic", image},
		{"image of a pod on another node", other, "strategic", image},
		{"result annotation of a pod on another node", other, "merge", annotationPatch(annObservedPower, "Running")},
		{"label of a pod on its node", own, "merge", `{"metadata":{"labels":{"app":"hijacked"}}}`},
		{"a user's request annotation", own, "merge", annotationPatch(annPowerState, "Shutdown")},
		{"removing a user's request annotation", own, "merge", `{"metadata":{"annotations":{"` + annPowerState + `":null}}}`},
		{"another annotation", own, "merge", annotationPatch("example.com/owner", "agent")},
		{"a result annotation with a label", own, "merge",
			`{"metadata":{"labels":{"app":"hijacked"},"annotations":{"` + annObservedPower + `":"Running"}}}`},
	} {
		t.Run("refused/"+c.name, func(t *testing.T) {
			out, err := kubectlAsAgent(k8s, nil, "-n", clusterNamespace, "patch", "pod", c.pod, "--type", c.patchType, "-p", c.patch)
			requireRefused(t, err, out, agentPolicy)
		})
	}

	t.Run("refused/event in another node's name", func(t *testing.T) {
		out, err := kubectlAsAgent(k8s, agentEvent(t, k8s, own, elsewhereNode), "create", "-f", "-")
		requireRefused(t, err, out, "crimux-node-agent-events")
	})

	t.Run("admitted/result annotations on its node's pod", func(t *testing.T) {
		uid := kubectl(t, k8s, "-n", clusterNamespace, "get", "pod", own, "-o", "jsonpath={.metadata.uid}")
		// The agent's own patch (nodeagent/kube.go): the UID, the results.
		set := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:"Paused",%q:"t1: rebooted (soft)"}}}`,
			uid, annObservedPower, annRebootResult)
		if out, err := kubectlAsAgent(k8s, nil, "-n", clusterNamespace, "patch", "pod", own, "--type", "merge", "-p", set); err != nil {
			t.Fatalf("the agent's patch of its results: %v\n%s", err, out)
		}
		remove := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:null}}}`, uid, annRebootResult)
		if out, err := kubectlAsAgent(k8s, nil, "-n", clusterNamespace, "patch", "pod", own, "--type", "merge", "-p", remove); err != nil {
			t.Fatalf("the agent's removal of a result: %v\n%s", err, out)
		}
		p, err := getPod(k8s, own)
		if err != nil {
			t.Fatal(err)
		}
		a := p.Metadata.Annotations
		if a[annObservedPower] != "Paused" || a[annPowerState] != "Running" || a["example.com/owner"] != "" {
			t.Fatalf("annotations after the agent's patches: %v", a)
		}
		if _, has := a[annRebootResult]; has {
			t.Fatalf("%s not removed: %v", annRebootResult, a)
		}
	})

	t.Run("admitted/event its node reports", func(t *testing.T) {
		if out, err := kubectlAsAgent(k8s, agentEvent(t, k8s, own, kubeletNode), "create", "-f", "-"); err != nil {
			t.Fatalf("the agent's event: %v\n%s", err, out)
		}
	})

	t.Run("admitted/a user's label change", func(t *testing.T) {
		kubectl(t, k8s, "-n", clusterNamespace, "label", "--overwrite", "pod", own, "app=relabelled")
	})
}

// createAgentPod creates agentPod named name on node and returns its name.
func createAgentPod(t *testing.T, k8s, name, node string) string {
	t.Helper()
	kubectlApply(t, k8s, fmt.Sprintf(agentPod, name, node))
	return name
}

// waitPolicyInForce waits until the API server enforces the admission
// policy just applied (it loads policies from its informer), probing with
// a dry run of a patch it refuses. Without the policy the test goes on, so
// that every case reports.
func waitPolicyInForce(t *testing.T, k8s, pod string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := kubectlAsAgent(k8s, nil, "-n", clusterNamespace, "patch", "pod", pod, "--dry-run=server",
			"--type", "merge", "-p", `{"metadata":{"labels":{"app":"probe"}}}`)
		if err != nil && strings.Contains(out, agentPolicy) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("admission policy %s not in force after 30 s: %v\n%s", agentPolicy, err, out)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// requireRefused: the request failed, refused by the named policy (not by
// RBAC, nor for any other reason).
func requireRefused(t *testing.T, err error, out, policy string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted: %s", out)
	}
	if !strings.Contains(out, "ValidatingAdmissionPolicy '"+policy+"'") {
		t.Fatalf("refused, but not by %s: %v\n%s", policy, err, out)
	}
	t.Logf("refused: %s", out)
}

func annotationPatch(key, value string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
}

// agentEvent is the Event the agent records on pod (nodeagent/kube.go),
// reported by node.
func agentEvent(t *testing.T, k8s, pod, node string) []byte {
	t.Helper()
	uid := kubectl(t, k8s, "-n", clusterNamespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
	now := time.Now().UTC()
	ev, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]string{"name": fmt.Sprintf("%s.%x", pod, now.UnixNano()), "namespace": clusterNamespace},
		"involvedObject": map[string]string{
			"kind": "Pod", "apiVersion": "v1", "namespace": clusterNamespace, "name": pod, "uid": uid,
		},
		"reason": "PowerStateChanged", "message": "agent policy test", "type": "Normal",
		"source":         map[string]string{"component": "crimux", "host": node},
		"firstTimestamp": now.Format(time.RFC3339), "lastTimestamp": now.Format(time.RFC3339), "count": 1,
		"reportingComponent": "crimux.io/node-agent", "reportingInstance": node,
	})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// kubectlAsAgent runs the test bed's kubectl with the node agent's
// kubeconfig (test/cluster/pki: crimux-node-agent:<kubeletNode>).
func kubectlAsAgent(k8s string, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"),
		append([]string{"--kubeconfig", filepath.Join(clusterPKI, "crimux.kubeconfig"), "--request-timeout", "30s"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
