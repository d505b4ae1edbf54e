package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// agentVMPod is the agent test VM (a guest agent, booting in seconds) on
// node one; extra is more of the pod's YAML under metadata.annotations
// and spec.
const agentVMPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: ` + clusterNamespace + `
  annotations:
    crimux.io/eviction: %s
spec:
  nodeName: ` + kubeletNode + `
  runtimeClassName: vm
  containers:
  - name: vm
    image: ` + vmAgentImage + `
    imagePullPolicy: IfNotPresent
    resources:
      limits: {cpu: "1", memory: 512Mi}
%s`

// pluginMigrate runs kubectl crimux migrate POD --to NODE in the
// background; its output and error come on the channel once it ends.
func pluginMigrate(k8s, pod, node string) <-chan pluginResult {
	done := make(chan pluginResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"), "crimux", "migrate", pod, "--to", node, "-n", clusterNamespace)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(clusterPKI, "admin.kubeconfig"),
			"PATH="+filepath.Dir(bed.crimuxBin)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		done <- pluginResult{string(out), err}
	}()
	return done
}

type pluginResult struct {
	out string
	err error
}

// controllerKilled: three migrations of an agent VM from node one to
// node two with kubectl crimux migrate, the controller SIGKILLed in
// each, at another step (the target pod made but not ready; the memory
// streaming; the VM switched over, as the source's node agent reports it
// sent): a new controller (after the Lease of the dead one ran out)
// finishes each. The VM runs exactly once afterwards, the same machine,
// on the node asked; the plugin, following the object, says where; the
// objects end Succeeded.
func controllerKilled(t *testing.T, k8s string, ctl *controllerRun, c1 *daemonRun, c2 *crimux) {
	steps := []struct {
		name string
		at   func(pod string) func(vmMigration) bool
	}{
		// Each step is watched for every 200 ms or so; a step over before
		// it was seen (a busy host) still has the controller killed, at the
		// next one, and the log says so.
		{"the target pod made, not ready", func(string) func(vmMigration) bool {
			return func(m vmMigration) bool { return m.Status.Phase == "Scheduling" || m.Status.Phase == "TargetReady" }
		}},
		{"the memory streaming", func(string) func(vmMigration) bool {
			return func(m vmMigration) bool { return m.Status.Phase == "Running" || m.Status.Phase == "Succeeded" }
		}},
		{"the VM switched over", func(pod string) func(vmMigration) bool {
			return func(m vmMigration) bool { return sourceSentVM(k8s, pod) || m.Status.Phase == "Succeeded" }
		}},
	}
	for i, s := range steps {
		pod := fmt.Sprintf("vm-kill-%d", i)
		kubectlApply(t, k8s, fmt.Sprintf(agentVMPod, pod, "live-migrate", ""))
		waitVMPodRunning(t, k8s, pod)
		waitGuestExec(t, k8s, pod)
		bootID := guestText(t, k8s, pod, "cat /proc/sys/kernel/random/boot_id")
		done := pluginMigrate(k8s, pod, node2Name)
		at := waitMigration(t, k8s, pod, 3*time.Minute, pod+"'s migration at "+s.name, s.at(pod))
		ctl.kill()
		t.Logf("controller killed at %s: VMMigration %s %s (%s)", s.name, at.Metadata.Name, at.Status.Phase, at.Status.Message)
		ctl.start()
		var res pluginResult
		select {
		case res = <-done:
		case <-time.After(10 * time.Minute):
			t.Fatalf("kubectl crimux migrate %s still running after 10 minutes", pod)
		}
		m := waitMigration(t, k8s, pod, time.Minute, "the migration over", func(m vmMigration) bool {
			return m.Metadata.Name == at.Metadata.Name && (m.Status.Phase == "Succeeded" || m.Status.Phase == "Failed")
		})
		if res.err != nil || m.Status.Phase != "Succeeded" || m.Status.TargetNode != node2Name {
			t.Fatalf("killed at %s: VMMigration %s %s %s on %q: %s; kubectl crimux migrate: %v\n%s",
				s.name, m.Metadata.Name, m.Status.Phase, m.Status.Reason, m.Status.TargetNode, m.Status.Message, res.err, res.out)
		}
		if !strings.Contains(res.out, "target pod "+m.Status.TargetPod+" runs the VM on "+node2Name) {
			t.Errorf("kubectl crimux migrate does not say where the VM runs:\n%s", res.out)
		}
		waitVMPodRunning(t, k8s, m.Status.TargetPod)
		waitGuestExec(t, k8s, m.Status.TargetPod)
		requireOneVM(t)
		if id := guestText(t, k8s, m.Status.TargetPod, "cat /proc/sys/kernel/random/boot_id"); id != bootID {
			t.Fatalf("boot ID %s after the migration, %s before: the VM rebooted", id, bootID)
		}
		kubectl(t, k8s, "-n", clusterNamespace, "delete", "pod", m.Status.TargetPod, "--wait=true", "--timeout=3m")
	}
	waitSandboxesGone(t, c1, clusterNamespace)
	requireNode2Empty(t, c2)
}

// sourceSentVM: pod's node agent reported its VM sent (its
// migration-result Succeeded).
func sourceSentVM(k8s, pod string) bool {
	out, err := kubectlErr(k8s, "-n", clusterNamespace, "get", "pod", pod, "-o", `jsonpath={.metadata.annotations.crimux\.io/migration-result}`)
	return err == nil && strings.Contains(out, `"Succeeded"`)
}

// requireOneVM: exactly one VM runs, on node one or node two.
func requireOneVM(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "exactly one running VM on the two nodes", func() error {
		var running []string
		for node, list := range map[string]string{kubeletNode: virsh(t, "list", "--name"), node2Name: node2Virsh(t, "list", "--name")} {
			for _, d := range strings.Fields(list) {
				if strings.HasPrefix(d, "crimux-") {
					running = append(running, node+": "+d)
				}
			}
		}
		if len(running) != 1 {
			return fmt.Errorf("running VMs: %v", running)
		}
		return nil
	})
}

// drainLocalVolume: a VM whose pod mounts a hostPath cannot move; its
// drain reports it (the drain's eviction refused by its budget, the
// migration Failed LocalVolume, a warning event on the pod and on the
// node, the pod's LiveMigratable condition False) and leaves the VM
// running, as its strategy live-migrate says. Its strategy changed to
// live-migrate-or-shutdown, the next drain completes: the VM is shut
// down by the eviction.
func drainLocalVolume(t *testing.T, k8s string) {
	dir := t.TempDir()
	kubectlApply(t, k8s, fmt.Sprintf(agentVMPod, "vm-local", "live-migrate", `    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - name: data
    hostPath: {path: `+dir+`, type: Directory}
`))
	_, ctrID := waitVMPodRunning(t, k8s, "vm-local")
	waitProtected(t, k8s, "vm-local")
	out, err := kubectlLong(k8s, 3*time.Minute, "drain", kubeletNode, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=20s")
	t.Logf("kubectl drain of the node-local VM's node: %v\n%s", err, tail(out, 10))
	if err == nil || !strings.Contains(out, "vm-local") || !strings.Contains(out, "disruption budget") {
		t.Fatalf("kubectl drain: %v, want it refused for vm-local by its disruption budget", err)
	}
	m := waitMigration(t, k8s, "vm-local", time.Minute, "vm-local's migration refused", func(m vmMigration) bool {
		return m.Status.Phase == "Failed"
	})
	if m.Status.Reason != "LocalVolume" || !strings.Contains(m.Status.Message, "volume data is a hostPath") {
		t.Fatalf("VMMigration %s: %s %s, want Failed LocalVolume naming volume data", m.Metadata.Name, m.Status.Reason, m.Status.Message)
	}
	requireDrainReported(t, k8s, "vm-local", "VMBlocksDrain")
	if cond := kubectl(t, k8s, "-n", clusterNamespace, "get", "pod", "vm-local", "-o",
		`jsonpath={.status.conditions[?(@.type=="crimux.io/LiveMigratable")].status}`); cond != "False" {
		t.Errorf("vm-local's LiveMigratable condition %q, want False", cond)
	}
	if p, id := waitVMPodRunning(t, k8s, "vm-local"); id != ctrID || p.Metadata.UID == "" {
		t.Fatalf("vm-local's VM is container %s now, %s before: the drain touched it", id, ctrID)
	}

	kubectl(t, k8s, "-n", clusterNamespace, "annotate", "pod", "vm-local", "--overwrite", "crimux.io/eviction=live-migrate-or-shutdown")
	testutil.Eventually(t, time.Minute, "vm-local let go", func() error {
		if l := kubectl(t, k8s, "-n", clusterNamespace, "get", "pod", "vm-local", "-o", `jsonpath={.metadata.labels.crimux\.io/eviction-pdb}`); l != "" {
			return fmt.Errorf("still protected by %s", l)
		}
		return nil
	})
	requireDrainReported(t, k8s, "vm-local", "VMReleasedToDrain")
	drain(t, k8s, kubeletNode)
	if _, err := getPod(k8s, "vm-local"); err == nil {
		t.Fatal("vm-local still there after the drain that may shut it down")
	}
	kubectl(t, k8s, "uncordon", kubeletNode)
}

// requireDrainReported: a warning of reason about pod, on the pod and
// on its node.
func requireDrainReported(t *testing.T, k8s, pod, reason string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, reason+" on the pod and the node", func() error {
		onPod := kubectl(t, k8s, "-n", clusterNamespace, "get", "events", "--field-selector", "involvedObject.name="+pod+",reason="+reason, "-o", "name")
		onNode := kubectl(t, k8s, "-n", "default", "get", "events", "--field-selector", "involvedObject.kind=Node,involvedObject.name="+kubeletNode+",reason="+reason, "-o", "name")
		if onPod == "" || onNode == "" {
			return fmt.Errorf("events %s: on the pod %q, on the node %q", reason, onPod, onNode)
		}
		return nil
	})
}
