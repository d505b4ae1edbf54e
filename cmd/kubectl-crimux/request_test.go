package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// fakeAgent answers a pod's request annotations as the node agent would,
// with answer(annotations) -> the result annotations to add.
func fakeAgent(t *testing.T, c *fake.Clientset, name string, answer func(a map[string]string) map[string]string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			p, err := c.CoreV1().Pods(testNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			changes := map[string]*string{}
			for k, v := range answer(p.Annotations) {
				if p.Annotations[k] != v {
					changes[k] = &v
				}
			}
			if len(changes) > 0 {
				_, _ = kubeclient.PatchAnnotations(ctx, c, fieldManager, p, changes)
			}
		}
	}()
}

// clientOf gives c, and no dynamic client (the VM verbs use none).
func clientOf(c kubernetes.Interface) clientFunc {
	return func(options) (clients, string, error) { return clients{kube: c}, testNS, nil }
}

func runRequest(c kubernetes.Interface, args ...string) (int, string, string) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := run(context.Background(), args, out, errOut, clientOf(c))
	return code, out.String(), errOut.String()
}

// TestPowerVerbs: each verb declares its power state and returns once the
// node agent observed the VM in it, or fails with the agent's reason.
func TestPowerVerbs(t *testing.T) {
	c := fake.NewClientset(vmPod("vm1", "node1"))
	fakeAgent(t, c, "vm1", func(a map[string]string) map[string]string {
		if a[kubeapi.AnnotationPowerState] == "Paused" {
			return map[string]string{kubeapi.AnnotationPowerStateError: "crimux.io/power-state: Paused: not applied: the VM is shut off"}
		}
		return map[string]string{kubeapi.AnnotationObservedPowerState: a[kubeapi.AnnotationPowerState]}
	})
	for verb, state := range map[string]string{"stop": "Shutdown", "start": "Running", "hibernate": "Hibernate", "resume": "Running"} {
		code, out, errOut := runRequest(c, verb, "vm1")
		if code != 0 || out != "pod default/vm1: power state "+state+"\n" {
			t.Errorf("%s: exit %d, %q %q; want the VM observed %s", verb, code, out, errOut, state)
		}
		if got := getPod(t, c, "vm1").Annotations[kubeapi.AnnotationPowerState]; got != state {
			t.Errorf("%s: %s = %q, want %s", verb, kubeapi.AnnotationPowerState, got, state)
		}
	}
	if code, _, errOut := runRequest(c, "pause", "vm1"); code != 1 || !strings.Contains(errOut, "not applied: the VM is shut off") {
		t.Errorf("pause refused by the agent: exit %d, %q; want its reason", code, errOut)
	}
}

// TestSnapshotAndReboot: snapshot, restore and reboot set their request
// and print the agent's result for that very value; a failure is an
// error; a snapshot name asked for before is refused up front.
func TestSnapshotAndReboot(t *testing.T) {
	c := fake.NewClientset(vmPod("vm1", "node1"))
	fakeAgent(t, c, "vm1", func(a map[string]string) map[string]string {
		out := map[string]string{}
		if v := a[kubeapi.AnnotationSnapshotRequest]; v == "full" {
			out[kubeapi.AnnotationSnapshotResult] = v + ": failed: its cap (libvirt.max_snapshots_per_vm = 8)"
		} else if v != "" {
			out[kubeapi.AnnotationSnapshotResult] = v + ": created"
		}
		if v := a[kubeapi.AnnotationRestoreRequest]; v != "" {
			out[kubeapi.AnnotationRestoreResult] = v + ": restored (Running)"
		}
		if v := a[kubeapi.AnnotationRebootRequest]; v != "" {
			out[kubeapi.AnnotationRebootResult] = v + ": rebooted (soft)"
		}
		return out
	})
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"snapshot", "vm1", "s1"}, "pod default/vm1: created\n"},
		{[]string{"restore", "vm1", "s1"}, "pod default/vm1: restored (Running)\n"},
		{[]string{"reboot", "vm1"}, "pod default/vm1: rebooted (soft)\n"},
		{[]string{"reboot", "vm1"}, "pod default/vm1: rebooted (soft)\n"}, // a new token each time
	} {
		if code, out, errOut := runRequest(c, tc.args...); code != 0 || out != tc.out {
			t.Errorf("%q: exit %d, %q %q; want %q", tc.args, code, out, errOut, tc.out)
		}
	}
	if code, _, errOut := runRequest(c, "snapshot", "vm1", "full"); code != 1 || !strings.Contains(errOut, "failed: its cap") {
		t.Errorf("a failed snapshot: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runRequest(c, "snapshot", "vm1", "full"); code != 1 || !strings.Contains(errOut, errAlreadyAsked.Error()) {
		t.Errorf("the snapshot name the pod asks for already: exit %d, %q; want it refused", code, errOut)
	}
}

// TestRequestWithoutAgent: nobody answers: the wait ends at --timeout,
// saying which node's agent did not answer; a missing pod is NotFound.
func TestRequestWithoutAgent(t *testing.T) {
	c := fake.NewClientset(vmPod("vm1", "node1"))
	start := time.Now()
	code, _, errOut := runRequest(c, "stop", "vm1", "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "the node agent on node1 did not answer in time") || time.Since(start) > 5*time.Second {
		t.Errorf("no agent: exit %d, %q after %v", code, errOut, time.Since(start))
	}
	if code, _, errOut := runRequest(c, "reboot", "nope"); code != 1 || !strings.Contains(errOut, `"nope" not found`) {
		t.Errorf("a missing pod: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{"snapshot", "vm1"}, {"stop"}, {"stop", "a", "b"}, {"console"}} {
		if code, _, errOut := runRequest(c, args...); code != 1 || !strings.Contains(errOut, "arguments") {
			t.Errorf("%q: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
}

func TestConsoleArgv(t *testing.T) {
	got := consoleArgv(options{namespace: "web", context: "prod"}, "db-0")
	if want := "kubectl --context prod --namespace web attach -i -t db-0"; strings.Join(got, " ") != want {
		t.Errorf("consoleArgv = %q, want %q", got, want)
	}
}
