package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// controllerLease is the e2e controller's leader election Lease
// duration: a controller started after one was killed acts after it.
const controllerLease = "6s"

// controllerRun is crimux-controller (the build's, bin/crimux-controller)
// against the bed's API server, as its admin, with leader election on,
// until the test ends.
type controllerRun struct {
	t   *testing.T
	cmd *exec.Cmd
	log string
	n   int
}

// startCrimuxController applies the VMMigration CRD and starts the
// controller; kube-scheduler (the drain's targets have no node) and
// kube-controller-manager (the disruption budgets' status) run beside.
func startCrimuxController(t *testing.T, k8s string) *controllerRun {
	t.Helper()
	kubectl(t, k8s, "apply", "-f", "../../deploy/controller/crd-vmmigration.yaml")
	kubectl(t, k8s, "wait", "--for=condition=Established", "crd/vmmigrations.crimux.io", "--timeout=60s")
	if out, err := kubectlErr(k8s, "create", "namespace", "crimux-system"); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("kubectl create namespace crimux-system: %v\n%s", err, out)
	}
	c := &controllerRun{t: t}
	c.start()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("crimux-controller's log:\n%s", tail(string(b), 60))
		}
		_ = os.Remove(c.log)
	})
	return c
}

func (c *controllerRun) start() {
	c.t.Helper()
	c.n++
	if c.log == "" {
		f, err := os.CreateTemp("", "crimux-controller-*.log")
		if err != nil {
			c.t.Fatal(err)
		}
		f.Close()
		c.log = f.Name()
	}
	log, err := os.OpenFile(c.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer log.Close()
	c.cmd = exec.Command(filepath.Join(filepath.Dir(bed.crimuxBin), "crimux-controller"),
		"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "--id", fmt.Sprintf("e2e-%d", c.n),
		"--lease-duration", controllerLease)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start crimux-controller: %v", err)
	}
	testutil.Eventually(c.t, time.Minute, "crimux-controller acting", func() error {
		b, _ := os.ReadFile(c.log)
		if strings.Count(string(b), "crimux-controller acting") < c.n {
			return fmt.Errorf("not leading yet:\n%s", tail(string(b), 5))
		}
		return nil
	})
}

// kill SIGKILLs the controller: no clean-up, its Lease held until it
// runs out.
func (c *controllerRun) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

func (c *controllerRun) stop() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.kill()
		}
	}
}

// vmMigration is a VMMigration as the e2e reads it.
type vmMigration struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Pod string `json:"pod"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Message    string `json:"message"`
		SourceNode string `json:"sourceNode"`
		TargetNode string `json:"targetNode"`
		TargetPod  string `json:"targetPod"`
		DowntimeMS int64  `json:"downtimeMs"`
		Progress   *struct {
			RemainingBytes uint64 `json:"remainingBytes"`
		} `json:"progress"`
	} `json:"status"`
}

// migrationsOf are pod's VMMigrations in the cluster namespace.
func migrationsOf(t *testing.T, k8s, pod string) []vmMigration {
	t.Helper()
	out := kubectl(t, k8s, "-n", clusterNamespace, "get", "vmmigrations", "-o", "json")
	var l struct {
		Items []vmMigration `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	var mine []vmMigration
	for _, m := range l.Items {
		if m.Spec.Pod == pod {
			mine = append(mine, m)
		}
	}
	return mine
}

// waitMigration waits until pod has a VMMigration ok says yes to.
func waitMigration(t *testing.T, k8s, pod string, timeout time.Duration, what string, ok func(vmMigration) bool) vmMigration {
	t.Helper()
	var found vmMigration
	testutil.EventuallyEvery(t, timeout, 200*time.Millisecond, what, func() error {
		for _, m := range migrationsOf(t, k8s, pod) {
			if ok(m) {
				found = m
				return nil
			}
		}
		return fmt.Errorf("pod %s's migrations: %+v", pod, migrationsOf(t, k8s, pod))
	})
	return found
}

// kubectlLong runs kubectl with a deadline of its own (a drain).
func kubectlLong(k8s string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"), append([]string{"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitProtected waits until the controller protected pod from eviction:
// its budget label and the budget.
func waitProtected(t *testing.T, k8s, pod string) string {
	t.Helper()
	var budget string
	testutil.Eventually(t, time.Minute, "pod "+pod+" protected by a disruption budget", func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "get", "pod", pod, "-o", `jsonpath={.metadata.labels.crimux\.io/eviction-pdb}`)
		if err != nil || out == "" {
			return fmt.Errorf("no label: %v %s", err, out)
		}
		budget = out
		_, err = kubectlErr(k8s, "-n", clusterNamespace, "get", "pdb", budget)
		return err
	})
	return budget
}
