package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// migratePod is the Debian guest as a VM pod on node one, to be moved.
var migratePod = debianVMPod("vm-mig", "")

// migrateCounter counts in the guest's memory (tmpfs), five times a
// second, as long as the SSH session that started it lives.
const migrateCounter = `i=0; while :; do i=$((i+1)); echo $i >/dev/shm/crimux-count; sleep 0.2; done`

// TestVMMigrateKubectl (make e2e-migrate): the bed's cluster with a
// kubelet on each node; the Debian guest runs on node one with a process
// counting in memory, started by an open SSH session (kubectl
// port-forward), and a file written to its root disk. kubectl crimux
// migrate moves it to node two: the counter goes on from where it was (no
// reboot: memory moved), the session's processes are there, the file is
// there, the guest has the target pod's IP, kubectl exec and an SSH login
// through kubectl port-forward reach it there, kubectl logs shows its
// console from the switch-over on; the source pod is deleted and node one
// keeps no domain, tap, cgroup, disk or record of it.
func TestVMMigrateKubectl(t *testing.T) {
	if os.Getenv("CRIMUX_MIGRATE") == "" {
		t.Skip("node two is not up: make e2e-migrate runs the migration tests")
	}
	k8s := k8sDir(t)
	requireVM(t)
	requireNode2(t)
	c1 := startClusterNode(t, k8s, migrationSection(1, ""), debianImage)
	startClusterNodeTwo(t, k8s, migrationSection(2, ""), debianImage)
	requireNodesReady(t, k8s)
	key, pub := sshKey(t)
	kubectlApply(t, k8s, fmt.Sprintf(migratePod, pub))

	src, srcID := waitVMPodRunning(t, k8s, "vm-mig")
	waitGuestExec(t, k8s, "vm-mig")
	// A booted machine moves: cloud-init done (its first boot's work would
	// otherwise go on across the switch-over, and time the test).
	kubectl(t, k8s, "-n", clusterNamespace, "exec", "vm-mig", "--", "cloud-init", "status", "--wait")
	kubectl(t, k8s, "-n", clusterNamespace, "exec", "vm-mig", "--", "sh", "-c", "echo crimux-migrated-disk >/var/tmp/migrate-file && sync")
	session := startSSHSession(t, k8s, key, "vm-mig", migrateCounter)
	before := guestCount(t, k8s, "vm-mig")
	net := snapshotPodNet(t, c1.crimux, c1.crictl("pods", "--namespace", clusterNamespace, "--name", "vm-mig", "-q"))

	out := kubectlCrimux(t, k8s, "migrate", "vm-mig", "--to", node2Name, "-n", clusterNamespace)
	t.Logf("kubectl crimux migrate:\n%s", out)
	target := migratedTarget(t, out)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := kubectlErr(k8s, "-n", clusterNamespace, "logs", target)
			t.Logf("kubectl logs %s (the guest's console on node two):\n%s", target, tail(logs, 40))
		}
	})

	dst, _ := waitVMPodRunning(t, k8s, target)
	if !strings.HasPrefix(dst.Status.PodIP, "10.88.78.") {
		t.Fatalf("the target pod's IP %q is not on node two's pod network", dst.Status.PodIP)
	}
	if after := guestCount(t, k8s, target); after <= before {
		t.Fatalf("the guest's counter reads %d on node two, %d before: memory was not moved", after, before)
	}
	if ps := kubectl(t, k8s, "-n", clusterNamespace, "exec", target, "--", "pgrep", "-u", debianUser, "-f", "crimux-count"); ps == "" {
		t.Fatal("the SSH session's counter is gone from the guest")
	}
	if f := kubectl(t, k8s, "-n", clusterNamespace, "exec", target, "--", "cat", "/var/tmp/migrate-file"); f != "crimux-migrated-disk" {
		t.Fatalf("the file on the root disk reads %q on node two", f)
	}
	requireGuestAddress(t, k8s, target, dst.Status.PodIP)
	requireSSHLogin(t, k8s, key, target)
	// The target pod's log is the guest's console from the switch-over on,
	// after crimux's line saying where the VM came from.
	arrived := "this VM arrived from " + clusterNamespace + "/vm-mig by live migration"
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", target); !strings.Contains(logs, arrived) {
		t.Fatalf("kubectl logs %s lacks %q:\n%s", target, arrived, tail(logs, 20))
	}
	session.stop()

	if _, err := getPod(k8s, "vm-mig"); err == nil {
		t.Fatal("the source pod is still there after kubectl crimux migrate")
	}
	requireVMPodLeftNothing(t, c1, src, srcID, net)
}

// waitVMPodRunning waits for a VM pod's container to run and returns the
// pod and the container's ID.
func waitVMPodRunning(t *testing.T, k8s, name string) (clusterPod, string) {
	t.Helper()
	var p clusterPod
	var id string
	testutil.Eventually(t, 10*time.Minute, name+" Running", func() error {
		var err error
		if p, err = getPod(k8s, name); err == nil {
			id, _, err = p.runningID()
		}
		return err
	})
	return p, id
}

// waitGuestExec waits until kubectl exec reaches the guest's agent.
func waitGuestExec(t *testing.T, k8s, pod string) {
	t.Helper()
	testutil.Eventually(t, guestBootTimeout, "kubectl exec reaching the guest agent of "+pod, func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", pod, "--", "true")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// guestCount reads the counter through kubectl exec, once it counts. The
// wait is long: right after a move under TCG the guest runs slowly (qemu
// translates its code anew) and its agent may be slow to answer.
func guestCount(t *testing.T, k8s, pod string) int {
	t.Helper()
	var n int
	testutil.Eventually(t, 3*time.Minute, "the guest's counter", func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", pod, "--", "cat", "/dev/shm/crimux-count")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		n, err = strconv.Atoi(strings.TrimSpace(out))
		return err
	})
	return n
}

// sshSession is an ssh client running a command in the guest through
// kubectl port-forward.
type sshSession struct {
	cmd  *exec.Cmd
	stop func()
}

// startSSHSession logs in to pod's guest over kubectl port-forward with
// key (once sshd lets the key in) and leaves command running in the
// session; it returns once command has written /dev/shm/crimux-count.
func startSSHSession(t *testing.T, k8s, key, pod, command string) *sshSession {
	t.Helper()
	requireSSHLogin(t, k8s, key, pod)
	local, stopForward, err := kubectlPortForward(k8s, pod, 22)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ssh", append(sshOptions(key, local), debianUser+"@127.0.0.1", command)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		stopForward()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s := &sshSession{cmd: cmd, stop: func() { cancel(); <-exited; stopForward() }}
	t.Cleanup(s.stop)
	testutil.Eventually(t, time.Minute, "the SSH session's command counting", func() error {
		select {
		case <-exited:
			t.Fatalf("the SSH session ended: %v\n%s", cmd.ProcessState, out.String())
		default:
		}
		_, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", pod, "--", "test", "-s", "/dev/shm/crimux-count")
		return err
	})
	return s
}

func sshOptions(key string, port int) []string {
	return []string{"-i", key, "-p", strconv.Itoa(port), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}
}

// requireSSHLogin: a new SSH login through kubectl port-forward to pod
// runs a command in the guest.
func requireSSHLogin(t *testing.T, k8s, key, pod string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "ssh through kubectl port-forward to "+pod, func() error {
		local, stop, err := kubectlPortForward(k8s, pod, 22)
		if err != nil {
			return err
		}
		defer stop()
		out, err := exec.Command("ssh", append(sshOptions(key, local), debianUser+"@127.0.0.1", "id", "-un")...).CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), debianUser) {
			return fmt.Errorf("ssh: %v: %s", err, out)
		}
		return nil
	})
}

// requireGuestAddress: the guest's interface has the pod's IP.
func requireGuestAddress(t *testing.T, k8s, pod, ip string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "the guest readdressed to "+ip, func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", pod, "--", "ip", "-4", "-o", "addr", "show")
		if err == nil && !strings.Contains(out, " "+ip+"/") {
			err = fmt.Errorf("the guest's addresses:\n%s", out)
		}
		return err
	})
}

// kubectlCrimux runs kubectl crimux ARGS as the cluster admin: kubectl
// finds the plugin, kubectl-crimux, beside crimux on PATH.
func kubectlCrimux(t *testing.T, k8s string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"), append([]string{"crimux"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(clusterPKI, "admin.kubeconfig"),
		"PATH="+filepath.Dir(bed.crimuxBin)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl crimux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// migratedTarget is the target pod's name, from the plugin's output.
func migratedTarget(t *testing.T, out string) string {
	t.Helper()
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "vm-mig-mig-") {
			return strings.Trim(f, ".:,")
		}
	}
	t.Fatalf("kubectl crimux migrate names no target pod:\n%s", out)
	return ""
}
