package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

// agentCapConfig writes the config TestAgentCallsAreCapped's crimux
// starts with: the default per-VM cap, written out so a reload can
// change it.
func agentCapConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crimux.toml")
	writeFile(t, path, fmt.Sprintf("[libvirt]\nagent_calls_per_vm = %d", agentCapPerVM))
	return path
}

// checkAgentCapReloaded: `crimux reload` (the unit's ExecReload) with
// the per-VM cap lowered to 1 applies it to the running VM runtime: of
// two execs into the guest whose agent does not answer, the second is
// refused naming the new cap. A reload that also changes a key only a
// restart applies fails: crimux reload exits 1 naming the key, nothing
// of that config is applied (the cap stays 1), and crimux goes on
// serving on its socket.
func checkAgentCapReloaded(t *testing.T, c *crimux, rt runtimeapi.RuntimeServiceClient, ctrID string) {
	t.Helper()
	c.rewriteConfig(t, "[libvirt]\nagent_calls_per_vm = 1")
	if out, code := crimuxReload(t, c); code != 0 || !strings.Contains(out, "config reloaded") {
		t.Fatalf("crimux reload with agent_calls_per_vm = 1: exit %d: %s", code, out)
	}
	requireSecondExecRefused(t, rt, ctrID, "after the reload")

	// The harness's --listen flag wins over the file's listen, so the key
	// changed here is another restart-only one; the cgroup-v2 node's
	// systemctl reload changes listen (node_restart_test.go).
	c.rewriteConfig(t, "[libvirt]\nagent_calls_per_vm = 8\nmax_vcpus = 3")
	out, code := crimuxReload(t, c)
	if code != 1 || !strings.Contains(out, "libvirt.max_vcpus cannot change while crimux runs") {
		t.Fatalf("crimux reload with libvirt.max_vcpus changed: exit %d: %s; want 1 naming the key", code, out)
	}
	if _, err := rt.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("crimux stopped serving on its socket after the refused reload: %v", err)
	}
	requireSecondExecRefused(t, rt, ctrID, "after the refused reload (its cap of 8 not applied)")
}

// crimuxReload runs crimux reload against c's process.
func crimuxReload(t *testing.T, c *crimux) (string, int) {
	t.Helper()
	out, err := exec.Command(bed.crimuxBin, "reload", "--pid", strconv.Itoa(c.cmd.Process.Pid), "--timeout", "1m").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("crimux reload: %v", err)
	}
	return string(out), 0
}

// requireSecondExecRefused: with a per-VM cap of 1, an exec waiting for
// the hung agent holds the VM's one slot, and another is refused once its
// wait for a slot ends, naming the cap. Three at once, tried again while
// libvirt answers every call at once (its agent marked unavailable after
// a timeout, until it tries it again): any refusal must name the cap of 1.
func requireSecondExecRefused(t *testing.T, rt runtimeapi.RuntimeServiceClient, ctrID, when string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, when+": an exec refused under agent_calls_per_vm = 1", func() error {
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := rt.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"true"}, Timeout: agentCapExecTimeout})
				errs <- err
			}()
		}
		var last error
		refused := false
		for range 3 {
			err := <-errs
			if status.Code(err) != codes.ResourceExhausted {
				last = err
				continue
			}
			if !strings.Contains(err.Error(), "libvirt.agent_calls_per_vm = 1") {
				t.Fatalf("%s: an exec refused under another cap than the reloaded 1: %v", when, err)
			}
			refused = true
		}
		if !refused {
			return fmt.Errorf("none of 3 execs at once was refused; e.g. %v", last)
		}
		return nil
	})
}
