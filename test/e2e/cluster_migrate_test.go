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
			// The console says whether the guest is alive (its kernel,
			// a hung task) when the agent never answers.
			console, _ := kubectlErr(k8s, "-n", clusterNamespace, "logs", "--tail=25", pod)
			return fmt.Errorf("%v: %s\nthe guest's console, last lines:\n%s", err, out, console)
		}
		return nil
	})
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
