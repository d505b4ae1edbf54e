package e2e

import (
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

// The node agent's annotations (nodeagent/doc.go): requests users set with
// kubectl annotate, results crimux writes back on the pod.
const (
	annPowerState      = "crimux.io/power-state"
	annObservedPower   = "crimux.io/observed-power-state"
	annPowerError      = "crimux.io/power-state-error"
	annRebootRequest   = "crimux.io/reboot-request"
	annRebootResult    = "crimux.io/reboot-result"
	annSnapshotRequest = "crimux.io/snapshot-request"
	annSnapshotResult  = "crimux.io/snapshot-result"
	annRestoreRequest  = "crimux.io/restore-request"
	annRestoreResult   = "crimux.io/restore-result"
)

// vmPodRef is the VM pod of a cluster test and what must not change while
// its power state does.
type vmPodRef struct {
	k8s, name, uid, ctrID string
}

func (v vmPodRef) annotate(t *testing.T, kv string) {
	t.Helper()
	kubectl(t, v.k8s, "-n", clusterNamespace, "annotate", "--overwrite", "pod", v.name, kv)
}

// waitAnnotation waits until the pod's annotation key satisfies ok, and
// returns the pod.
func (v vmPodRef) waitAnnotation(t *testing.T, timeout time.Duration, key string, ok func(string) bool) clusterPod {
	t.Helper()
	var p clusterPod
	testutil.Eventually(t, slowed(timeout), "pod annotation "+key, func() error {
		var err error
		if p, err = getPod(v.k8s, v.name); err != nil {
			return err
		}
		if got, has := p.Metadata.Annotations[key]; !has || !ok(got) {
			return fmt.Errorf("%s = %q (present %v)", key, got, has)
		}
		return nil
	})
	return p
}

// requireSameContainer: the pod kept its UID and its one container, with
// no restart.
func (v vmPodRef) requireSameContainer(t *testing.T, p clusterPod, when string) {
	t.Helper()
	if p.Metadata.UID != v.uid || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("%s: pod UID %s (was %s), %d container statuses", when, p.Metadata.UID, v.uid, len(p.Status.ContainerStatuses))
	}
	cs := p.Status.ContainerStatuses[0]
	if _, id, _ := strings.Cut(cs.ContainerID, "://"); id != v.ctrID || cs.RestartCount != 0 {
		t.Fatalf("%s: container %s with %d restarts, want %s with none", when, cs.ContainerID, cs.RestartCount, v.ctrID)
	}
}

// setPowerByAnnotation sets crimux.io/power-state and waits until crimux
// reports it observed, with no error, on the same container.
func (v vmPodRef) setPowerByAnnotation(t *testing.T, state string) clusterPod {
	t.Helper()
	start := time.Now()
	v.annotate(t, annPowerState+"="+state)
	p := v.waitAnnotation(t, 3*time.Minute, annObservedPower, func(s string) bool { return s == state })
	if e, has := p.Metadata.Annotations[annPowerError]; has {
		t.Fatalf("power state %s observed, but %s = %q", state, annPowerError, e)
	}
	v.requireSameContainer(t, p, "power state "+state)
	t.Logf("kubectl annotate %s=%s: observed after %v", annPowerState, state, time.Since(start).Round(time.Second))
	return p
}

// checkPowerStatesByAnnotation: each power state from kubectl
// annotate, as the domain shows it; an invalid value reported and
// ignored; an exec probe on a VM that is off errors (kubelet discards
// the probe: no restart) while kubectl exec says why.
func checkPowerStatesByAnnotation(t *testing.T, v vmPodRef) {
	t.Helper()
	domain := domainOf(v.ctrID)
	guestWrite(t, v, "echo before-hibernate > /root/power-marker && sync")

	v.setPowerByAnnotation(t, "Hibernate")
	if st := virsh(t, "domstate", domain); st != "shut off" {
		t.Fatalf("Hibernate: domstate %q, want shut off", st)
	}
	if info := virsh(t, "dominfo", domain); !strings.Contains(info, "Managed save:   yes") {
		t.Fatalf("Hibernate: no managed save:\n%s", info)
	}
	requireExecRefused(t, v, "Hibernate")
	v.setPowerByAnnotation(t, "Running")
	if got := guestRead(t, v, "cat /root/power-marker"); got != "before-hibernate" {
		t.Fatalf("after Hibernate and Running: /root/power-marker = %q, want the file written before (same disk, same memory)", got)
	}

	// Shutdown and back through the plugin's verbs, thin clients of the
	// same annotation that wait for the node agent's answer.
	if out := kubectlCrimux(t, v.k8s, "stop", v.name, "-n", clusterNamespace); !strings.Contains(out, "power state Shutdown") {
		t.Fatalf("kubectl crimux stop: %q, want the VM observed Shutdown", out)
	}
	if st := virsh(t, "domstate", domain); st != "shut off" {
		t.Fatalf("Shutdown: domstate %q, want shut off", st)
	}
	requireExecRefused(t, v, "Shutdown")
	// The VM pod has an exec liveness probe every 5 s: while the VM is off
	// it errors, and kubelet must neither restart nor recreate the VM.
	time.Sleep(30 * time.Second)
	p, err := getPod(v.k8s, v.name)
	if err != nil {
		t.Fatal(err)
	}
	v.requireSameContainer(t, p, "30 s of liveness probes on a VM shut down by its user")
	if out := kubectlCrimux(t, v.k8s, "start", v.name, "-n", clusterNamespace); !strings.Contains(out, "power state Running") {
		t.Fatalf("kubectl crimux start: %q, want the VM observed Running", out)
	}
	if p, err = getPod(v.k8s, v.name); err != nil {
		t.Fatal(err)
	}
	v.requireSameContainer(t, p, "kubectl crimux stop and start")
	guestRead(t, v, "cat /root/power-marker") // booted again, from the same disk

	// Paused through the plugin, which sets the annotation and waits for
	// the node agent's answer.
	if out := kubectlCrimux(t, v.k8s, "pause", v.name, "-n", clusterNamespace); !strings.Contains(out, "power state Paused") {
		t.Fatalf("kubectl crimux pause: %q, want the VM observed Paused", out)
	}
	if st := virsh(t, "domstate", domain); st != "paused" {
		t.Fatalf("Paused: domstate %q, want paused", st)
	}
	v.annotate(t, annPowerState+"=Sleeping")
	p = v.waitAnnotation(t, time.Minute, annPowerError, func(s string) bool { return strings.Contains(s, "Sleeping") })
	if obs := p.Metadata.Annotations[annObservedPower]; obs != "Paused" {
		t.Fatalf("after an invalid power state the observed state is %q, want Paused (unchanged)", obs)
	}
	if st := virsh(t, "domstate", domain); st != "paused" {
		t.Fatalf("an invalid power state changed the domain: %q", st)
	}
	if ev := kubectl(t, v.k8s, "-n", clusterNamespace, "get", "events", "--field-selector", "involvedObject.name="+v.name, "-o", "jsonpath={.items[*].reason}"); !strings.Contains(ev, "InvalidPowerState") {
		t.Fatalf("no InvalidPowerState event on the pod: reasons %q", ev)
	}
	p = v.setPowerByAnnotation(t, "Running")
	if e, has := p.Metadata.Annotations[annPowerError]; has {
		t.Fatalf("%s still %q once the state is valid and reached", annPowerError, e)
	}
}

// requireExecRefused: kubectl exec in a VM its user turned off fails,
// naming the power state.
func requireExecRefused(t *testing.T, v vmPodRef, state string) {
	t.Helper()
	out, err := kubectlErr(v.k8s, "-n", clusterNamespace, "exec", v.name, "--", "true")
	if err == nil || !strings.Contains(out, state) {
		t.Fatalf("kubectl exec in a VM in %s: %v, %q; want a refusal naming %s", state, err, out, state)
	}
}

// guestRead runs a shell command in the guest through kubectl exec,
// waiting for the guest agent (the guest may be booting), and returns its
// output.
func guestRead(t *testing.T, v vmPodRef, cmd string) string {
	t.Helper()
	var out string
	// A try every 2 s at most: each is an exec through kube-apiserver,
	// kubelet and crimux on the CPUs the booting guest needs.
	testutil.EventuallyEvery(t, guestBootTimeout, 2*time.Second, "kubectl exec "+cmd, func() error {
		var err error
		out, err = kubectlErr(v.k8s, "-n", clusterNamespace, "exec", v.name, "--", "sh", "-c", cmd)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	return out
}

func guestWrite(t *testing.T, v vmPodRef, cmd string) { t.Helper(); guestRead(t, v, cmd) }

// checkSnapshotByAnnotation: a snapshot request, a file written after it,
// a restore request: the file is gone, and both results are on the pod.
func checkSnapshotByAnnotation(t *testing.T, v vmPodRef) {
	t.Helper()
	v.annotate(t, annSnapshotRequest+"=s1")
	v.waitAnnotation(t, 3*time.Minute, annSnapshotResult, func(s string) bool { return s == "s1: created" })
	guestWrite(t, v, "echo after-s1 > /root/after-s1 && sync")
	v.annotate(t, annRestoreRequest+"=s1")
	p := v.waitAnnotation(t, 3*time.Minute, annRestoreResult, func(s string) bool { return strings.HasPrefix(s, "s1: restored") })
	v.requireSameContainer(t, p, "restore s1")
	if out := guestRead(t, v, "ls /root"); strings.Contains(out, "after-s1") {
		t.Fatalf("/root/after-s1, written after snapshot s1, is still there after restoring s1: %q", out)
	}
	if out := kubectlCrimux(t, v.k8s, "snapshot", v.name, "s2", "-n", clusterNamespace); !strings.Contains(out, ": created") {
		t.Fatalf("kubectl crimux snapshot: %q, want s2 created", out)
	}
	if out := kubectlCrimux(t, v.k8s, "snapshot", "list", v.name, "-n", clusterNamespace); !snapshotListed(out, "s1") || !snapshotListed(out, "s2") {
		t.Fatalf("kubectl crimux snapshot list:\n%s\nwant s1 and s2", out)
	}
	if out := kubectlCrimux(t, v.k8s, "snapshot", "delete", v.name, "s2", "-n", clusterNamespace); !strings.Contains(out, "snapshot s2 deleted") {
		t.Fatalf("kubectl crimux snapshot delete: %q, want s2 deleted", out)
	}
	if out := kubectlCrimux(t, v.k8s, "snapshot", "list", v.name, "-n", clusterNamespace); !snapshotListed(out, "s1") || snapshotListed(out, "s2") {
		t.Fatalf("kubectl crimux snapshot list after deleting s2:\n%s\nwant s1 alone", out)
	}
	if out := virsh(t, "snapshot-list", "--name", domainOf(v.ctrID)); strings.Contains(out, "s2") || !strings.Contains(out, "s1") {
		t.Fatalf("virsh snapshot-list after kubectl crimux snapshot delete s2: %q, want s1 alone", out)
	}
}

// snapshotListed: kubectl crimux snapshot list's table has a row of name.
func snapshotListed(table, name string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// checkRebootOnceAcrossRestart: a reboot request with crimux killed
// around it and started again: the guest boots exactly once more. r1
// arrives while crimux is frozen and it is SIGKILLed right after (the
// restarted crimux takes it up); r2 is taken up and crimux is SIGKILLed
// 2 s into the reboot (the guest agent has the guest reboot itself, so
// nothing is left for crimux to finish; a request found started is not
// done again).
func checkRebootOnceAcrossRestart(t *testing.T, c *daemonRun, v vmPodRef) {
	t.Helper()
	rebootOnce(t, c, v, "r1", func() {
		if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}, func() {
		time.Sleep(300 * time.Millisecond)
		c.restart()
	})
	// r2 through kubectl crimux reboot, a thin client of the same
	// annotation (its own token), which waits for the node agent's
	// answer across the restart and prints it.
	rebootOnce(t, c, v, "", func() {}, func() {
		time.Sleep(2 * time.Second)
		c.restart()
	})
}

// pluginReboot runs kubectl crimux reboot on v in the background; its
// output (or error) comes on the channel once it ends.
func pluginReboot(v vmPodRef) <-chan string {
	done := make(chan string, 1)
	go func() {
		cmd := exec.Command(filepath.Join(v.k8s, "kubectl"), "crimux", "reboot", v.name, "-n", clusterNamespace)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(clusterPKI, "admin.kubeconfig"),
			"PATH="+filepath.Dir(bed.crimuxBin)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			out = append(out, []byte("\nerror: "+err.Error())...)
		}
		done <- string(out)
	}()
	return done
}

// rebootOnce annotates a reboot request token ("": kubectl crimux reboot
// asks, with a token of its own) between before and after and requires
// exactly one more boot in the console.
func rebootOnce(t *testing.T, c *daemonRun, v vmPodRef, token string, before, after func()) {
	t.Helper()
	boots := func() int {
		return strings.Count(kubectl(t, v.k8s, "-n", clusterNamespace, "logs", v.name), "Linux version ")
	}
	was := boots()
	before()
	var plugin <-chan string
	if token == "" {
		plugin = pluginReboot(v)
	} else {
		v.annotate(t, annRebootRequest+"="+token)
	}
	after()
	var p clusterPod
	if plugin != nil {
		out := <-plugin
		if !strings.HasPrefix(out, "pod "+clusterNamespace+"/"+v.name+": ") || strings.Contains(out, "error") {
			t.Fatalf("kubectl crimux reboot across a crimux restart printed %q, want the node agent's answer", out)
		}
		t.Logf("kubectl crimux reboot: %s", strings.TrimSpace(out))
		var err error
		if p, err = getPod(v.k8s, v.name); err != nil {
			t.Fatal(err)
		}
		token, _, _ = strings.Cut(p.Metadata.Annotations[annRebootResult], ": ")
	} else {
		p = v.waitAnnotation(t, 3*time.Minute, annRebootResult, func(s string) bool { return strings.HasPrefix(s, token+": ") })
	}
	v.requireSameContainer(t, p, "reboot "+token+" across a crimux restart")
	// The result can come before the reboot shows: crimux restarted while
	// the guest was still shutting down reports the request it had
	// started. So: one more boot within minutes, and still one 20 s on.
	testutil.Eventually(t, 3*time.Minute, "one more boot in the console", func() error {
		if now := boots(); now != was+1 {
			logs := kubectl(t, v.k8s, "-n", clusterNamespace, "logs", v.name)
			return fmt.Errorf("%d boots before reboot request %s, %d now (%s = %q); the console ends:\n%s",
				was, token, now, annRebootResult, p.Metadata.Annotations[annRebootResult], tail(logs, 15))
		}
		return nil
	})
	guestRead(t, v, "true") // the guest is back
	time.Sleep(20 * time.Second)
	if now := boots(); now != was+1 {
		t.Fatalf("the console shows %d boots before reboot request %s and %d after; want exactly one more (%s = %q)",
			was, token, now, annRebootResult, p.Metadata.Annotations[annRebootResult])
	}
}
