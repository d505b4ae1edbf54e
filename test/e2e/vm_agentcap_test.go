package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

// Bounds of TestAgentCallsAreCapped.
const (
	// agentCapExecs parallel ExecSyncs, each with agentCapExecTimeout, at
	// one guest whose agent never answers.
	agentCapExecs       = 50
	agentCapExecTimeout = 20
	// agentCapPerVM is config's default agent_calls_per_vm.
	agentCapPerVM = 4
	// lifecycleStepBound bounds each step of another VM pod's life
	// (runp, create, start, stop, rm, rmp) while the execs wait. Each
	// takes a second or two on an idle bed (the test logs its baseline);
	// 30 s leaves a loaded 2-core host room, and is what a step queued in
	// libvirtd behind agent calls costs at least: before the caps, the 50
	// execs held all 20 of libvirtd's workers, 19 of them waiting for the
	// domain's agent job up to libvirt's 30 s job timeout, and a define
	// queued behind 30 more.
	lifecycleStepBound = 30 * time.Second
)

// TestAgentCallsAreCapped: a guest whose agent never answers cannot stall
// the node's VMs. The busybox test VM has no agent, and libvirt refuses a
// call to an agent that is not connected at once (in milliseconds: the
// test logs it); so the test's guest loads virtio_console (the host's
// module, from a virtio-fs share) and holds the agent's port open without
// answering, which is what a hung qemu-guest-agent looks like to libvirt:
// each call waits for the agent's 5 s timeout, one at a time per domain.
// Then 50 parallel ExecSyncs (20 s timeout each) reach the VM: at most the
// per-VM cap (agent_calls_per_vm, 4 by default) go to libvirtd, the others
// are refused at once with ResourceExhausted naming the cap; meanwhile
// another VM pod is run, created, started, stopped and removed, each step
// within lifecycleStepBound. Then the cap is changed by a config reload
// (checkAgentCapReloaded).
func TestAgentCallsAreCapped(t *testing.T) {
	parallel(t)
	requireVM(t)
	cfg := agentCapConfig(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", cfg)
	c.crictl("pull", vmImage)
	rt, _ := c.client()
	modDir := virtioConsoleDir(t)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-agentcap", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	v := startStorageVM(t, c, podID, pod, 0, fmt.Sprintf(`"mounts": [{"container_path": "/agentcap", "host_path": %q, "readonly": true}]`, modDir))

	// The busybox guest as it boots: no agent, refused at once.
	start := time.Now()
	_, err := rt.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: v.ctrID, Cmd: []string{"true"}, Timeout: agentCapExecTimeout})
	t.Logf("exec into the guest without an agent: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("exec into a guest without an agent: %v, want FailedPrecondition", err)
	}

	holdAgentPortOpen(t, v)
	execIntoHungAgent(t, rt, v.ctrID)
	baseline := vmLifecycle(t, c, "vm-agentcap-baseline")
	t.Logf("another VM pod's life, nothing else running: %s", baseline)

	results := make(chan execResult, agentCapExecs)
	go execStorm(rt, v.ctrID, results)
	time.Sleep(time.Second) // the admitted calls are in libvirtd
	during := vmLifecycle(t, c, "vm-agentcap-other")
	t.Logf("another VM pod's life, while the execs wait: %s", during)
	checkExecStorm(t, results)
	if slow := during.over(lifecycleStepBound); slow != "" {
		t.Fatalf("another VM pod's life while a guest's agent calls wait: %s took longer than %v (baseline %s)", slow, lifecycleStepBound, baseline)
	}
	checkAgentCapReloaded(t, c, rt, v.ctrID)
}

// virtioConsoleDir is a directory holding the host's virtio_console
// modules, as <kernel release>/virtio_console.ko: the test VM boots the
// host's newest cloud kernel (make bed), and the guest loads the module of
// its own release. Readable by the VM's virtiofsd.
func virtioConsoleDir(t *testing.T) string {
	t.Helper()
	mods, _ := filepath.Glob("/lib/modules/*-cloud-amd64/kernel/drivers/char/virtio_console.ko")
	if len(mods) == 0 {
		t.Fatal("no /lib/modules/*-cloud-amd64/kernel/drivers/char/virtio_console.ko: the test VM's kernel modules are missing (make bed)")
	}
	dir, err := os.MkdirTemp("", "crimux-agentcap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, mod := range mods {
		release := strings.Split(strings.TrimPrefix(mod, "/lib/modules/"), "/")[0]
		data, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, release), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, release, "virtio_console.ko"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// holdAgentPortOpen makes the guest open its agent's virtio port and
// never answer on it, and waits until libvirt has connected to the agent.
func holdAgentPortOpen(t *testing.T, v *testVM) {
	t.Helper()
	v.guestOutput(t, "grep -q ' /agentcap ' /proc/mounts || (mkdir -p /agentcap && mount -t virtiofs agentcap /agentcap); echo ok")
	if got := v.guestOutput(t, "grep -q '^virtio_console ' /proc/modules || insmod /agentcap/$(uname -r)/virtio_console.ko; grep -c '^virtio_console ' /proc/modules"); got != "1" {
		t.Fatalf("virtio_console in the guest: %q", got)
	}
	var port string
	testutil.Eventually(t, within(t, 20*time.Second), "the agent's port in the guest", func() error {
		port = v.guestOutput(t, `for p in /sys/class/virtio-ports/*; do [ "$(cat $p/name 2>/dev/null)" = org.qemu.guest_agent.0 ] && echo ${p##*/}; done; true`)
		if port == "" {
			return fmt.Errorf("no virtio port named org.qemu.guest_agent.0")
		}
		return nil
	})
	// Open, never read: a reader would see end of file while libvirt is
	// not yet connected, close the port, and libvirt would let go of the
	// agent again. A second open of the port fails (EBUSY): typed twice,
	// the line leaves one holder.
	v.guestOutput(t, fmt.Sprintf("setsid sh -c 'exec 3</dev/%s; exec sleep 99999' </dev/null >/dev/null 2>&1 & echo ok", port))
	testutil.Eventually(t, within(t, 30*time.Second), "libvirt connected to the guest's agent", func() error {
		if x := virsh(t, "dumpxml", v.domain); !strings.Contains(x, "name='org.qemu.guest_agent.0' state='connected'") {
			return fmt.Errorf("the agent's channel is not connected")
		}
		return nil
	})
}

// execIntoHungAgent is one exec into the guest whose agent does not
// answer: it waits for the agent's 5 s timeout (so the storm's admitted
// calls hold libvirtd's workers that long, each).
func execIntoHungAgent(t *testing.T, rt runtimeapi.RuntimeServiceClient, ctrID string) {
	t.Helper()
	testutil.Eventually(t, within(t, 30*time.Second), "an exec that waits for the agent", func() error {
		start := time.Now()
		_, err := rt.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"true"}, Timeout: agentCapExecTimeout})
		took := time.Since(start)
		if status.Code(err) != codes.FailedPrecondition || took < 4*time.Second {
			return fmt.Errorf("exec: %v after %v; want the agent's timeout", err, took.Round(time.Millisecond))
		}
		t.Logf("exec into the guest whose agent does not answer: %v after %v", err, took.Round(time.Millisecond))
		return nil
	})
}

// execResult is one ExecSync of the storm.
type execResult struct {
	err  error
	took time.Duration
}

// execStorm runs agentCapExecs ExecSyncs at once into ctrID.
func execStorm(rt runtimeapi.RuntimeServiceClient, ctrID string, results chan<- execResult) {
	var ready sync.WaitGroup
	ready.Add(agentCapExecs)
	gate := make(chan struct{})
	for range agentCapExecs {
		go func() {
			ready.Done()
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), 3*agentCapExecTimeout*time.Second)
			defer cancel()
			start := time.Now()
			_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"true"}, Timeout: agentCapExecTimeout})
			results <- execResult{err, time.Since(start)}
		}()
	}
	ready.Wait()
	close(gate)
}

// checkExecStorm: at most the per-VM cap of execs went to libvirtd; the
// others were refused at once, naming the cap.
func checkExecStorm(t *testing.T, results <-chan execResult) {
	t.Helper()
	var refused, admitted []execResult
	for range agentCapExecs {
		r := <-results
		if status.Code(r.err) == codes.ResourceExhausted {
			refused = append(refused, r)
			if !strings.Contains(r.err.Error(), fmt.Sprintf("libvirt.agent_calls_per_vm = %d", agentCapPerVM)) || r.took > 5*time.Second {
				t.Errorf("a refused exec: %v after %v; want the per-VM cap named, at once", r.err, r.took)
			}
			continue
		}
		admitted = append(admitted, r)
	}
	var slowest time.Duration
	for _, r := range refused {
		slowest = max(slowest, r.took)
	}
	t.Logf("%d execs refused with ResourceExhausted (slowest after %v), e.g. %v", len(refused), slowest.Round(time.Millisecond), firstErr(refused))
	for _, r := range admitted {
		t.Logf("an admitted exec: %v after %v", r.err, r.took.Round(time.Millisecond))
	}
	if len(admitted) > agentCapPerVM {
		t.Errorf("%d of %d execs went to libvirtd, want at most the per-VM cap %d", len(admitted), agentCapExecs, agentCapPerVM)
	}
}

func firstErr(rs []execResult) error {
	if len(rs) == 0 {
		return nil
	}
	return rs[0].err
}

// lifecycleTimes are how long each step of a VM pod's life took.
type lifecycleTimes []struct {
	step string
	took time.Duration
}

func (l lifecycleTimes) String() string {
	var b strings.Builder
	for i, s := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", s.step, s.took.Round(time.Millisecond))
	}
	return b.String()
}

// over names the first step that took longer than bound, "" if none.
func (l lifecycleTimes) over(bound time.Duration) string {
	for _, s := range l {
		if s.took > bound {
			return fmt.Sprintf("%s (%v)", s.step, s.took.Round(time.Millisecond))
		}
	}
	return ""
}

// vmLifecycle runs, creates, starts, stops (at once: a destroy), removes
// a VM pod, timing each step.
func vmLifecycle(t *testing.T, c *crimux, name string) lifecycleTimes {
	t.Helper()
	var times lifecycleTimes
	step := func(what string, args ...string) string {
		t.Helper()
		start := time.Now()
		out := c.crictl(args...)
		times = append(times, struct {
			step string
			took time.Duration
		}{what, time.Since(start)})
		return out
	}
	pod := vmPodJSON(t, name, testCgroupParent(t), "")
	podID := step("runp", "runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := step("create", "create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	step("start", "start", ctrID)
	step("stop", "stop", "--timeout", "0", ctrID)
	step("rm", "rm", ctrID)
	step("stopp", "stopp", podID)
	step("rmp", "rmp", podID)
	return times
}
