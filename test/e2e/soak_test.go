package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/soak"
)

// soakLimit is the growth allowed after the warm-up: 5 %.
const soakLimit = 0.05

// The soak's VMs run through a qemu wrapper of its own, asking a
// placement socket of its own, fixed: over an hour, a socket would be
// taken over by any crimux started meanwhile on it (the last crimux
// started owns a socket), and the soak's VMs refused.
const (
	soakWrapper   = "/usr/local/lib/crimux/crimux-qemu-wrapper-soak"
	soakPlacement = "/run/crimux-testbed/soak/placement.sock"
)

// soakMinAge is how long a crimux process has run before it is sampled:
// one just started is still resyncing, connecting and collecting, and
// would be compared with processes minutes old.
const soakMinAge = 20 * time.Second

// TestSoak: an hour of churn. For CRIMUX_SOAK (60m under make soak),
// against one crimux with the VM API and its metrics, rounds of two
// container pods and one or two VM pods made, booted and removed (each
// call retried until it succeeds, as kubelet would), a crictl exec into
// each container (streamed and --sync in turn), and on a VM that lives
// through the whole run a snapshot made and deleted and a pause and resume
// with crimuxctl; crimux is SIGKILLed and restarted every 3–5 minutes, at
// whatever moment. Between rounds, once a minute, with only the long-lived
// VM left, it samples crimux's RSS, goroutines, open fds, store size and
// libvirt connections (soaker.sample); from the 10th minute on none may
// grow more than 5 % (test/soak.Check: the median of minutes 10–20 against
// the median of the last 10). At the end every pod is removed, one
// collector pass runs (a restart), and the host counts (the chaos test's)
// must show nothing leaked and no VM recreated. The samples, their verdict
// and a plot go to CRIMUX_SOAK_OUT.{md,svg} when set (make soak:
// docs/bench/soak-60m).
//
// Run it alone: a kubelet on the bed's containerd (make e2e-kubelet,
// e2e-cluster) kills the running pods it does not know, the soak's
// container pods among them.
func TestSoak(t *testing.T) {
	requireVM(t)
	d := soakDuration(t)
	if out, err := exec.Command("pgrep", "-x", "kubelet").Output(); err == nil {
		t.Logf("WARNING: a kubelet runs beside the soak (pids %s): it kills the container pods it does not know", strings.Fields(string(out)))
	}
	if _, err := exec.LookPath("virt-admin"); err != nil {
		t.Fatalf("virt-admin (Debian's libvirt-clients, beside virsh) counts crimux's libvirt connections: %v", err)
	}
	ctl := ctlBin(t)
	confDir, _ := cni11ConfDir(t) // the collector's CNI GC runs through the kills too
	s := &soaker{t: t, ctl: ctl, duration: d, metricsAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), process: 1}
	s.c = startWrappedCrimux(t, soakWrapper, soakPlacement, "", "--log-level", "info", "--cni-conf-dir", confDir, "--metrics-address", s.metricsAddr)
	s.started = time.Now()
	s.c.crictl("pull", busyboxImage)
	s.c.crictl("pull", vmImage)
	parent := fmt.Sprintf("/crimux-soak/run%d", time.Now().UnixNano())
	t.Cleanup(func() { removeCgroupTree(parent) })
	s.ch = &chaos{t: t, c: s.c, parent: parent, run: time.Now().Unix() % 100000, qemu: map[string]map[int]bool{}}
	s.ch.rs, _ = s.c.client()
	t.Cleanup(s.dropPods) // before crimux stops: a run cut short leaves no VM running
	before := hostCounts(t, s.c, parent)

	s.vm = s.longLivedVM()
	var errs callErrors
	s.ch.onErr = errs.add
	out := soakOut()
	defer s.publish(out, true) // a run cut short still leaves its samples
	s.begun = time.Now()
	s.sample()
	stopKiller := s.killer(soakKillEvery(d))
	defer stopKiller() // before publish: a failure must not leave it killing
	next := time.Minute
	for round := 0; time.Since(s.begun) < d; round++ {
		s.round(round)
		if time.Since(s.begun) >= next {
			s.sample()
			for next <= time.Since(s.begun) {
				next += time.Minute
			}
		}
	}
	stopKiller()
	if last := s.samples[len(s.samples)-1]; time.Since(s.begun)-last.At > 30*time.Second {
		s.sample() // the end, unless the last round's sample is it
	}
	s.churn = time.Since(s.begun)
	t.Logf("the failed calls (crimux killed under them):\n%s", errs.summary())

	s.checkLongLivedVM()
	s.ch.down(s.vm.name, s.vm.podID, s.vm.ctrID)
	s.removeAll("")
	s.c.restart() // the start-up collector pass
	time.Sleep(3 * time.Second)
	s.removeAll("")
	time.Sleep(12 * time.Second) // a stray container cgroup is swept once 10 s old
	s.c.restart()
	after := settledCounts(t, s.c, parent, before, settleTimeout)
	s.leaks = map[string]int{}
	for _, k := range []string{"domains", "disks", "netns", "cgroups", "ips"} {
		s.leaks[k] = after[k] - before[k]
	}
	for id, pids := range s.ch.qemu {
		if len(pids) > 1 {
			s.recreated++
			t.Errorf("VM %s ran as qemu pids %v: recreated", id, pids)
		}
	}
	growth := s.publish(out, false)
	for _, g := range growth {
		if !g.OK {
			t.Errorf("%s grew: %s", g.Title, g.Line())
		}
	}
	for k, n := range s.leaks {
		if n != 0 {
			t.Errorf("leaked %s: before %d, after %d", k, before[k], after[k])
		}
	}
}

// soakDuration is CRIMUX_SOAK, the length of the churn; the test skips
// without it.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("CRIMUX_SOAK")
	if v == "" {
		t.Skip("CRIMUX_SOAK is not set to a duration (run make soak, or make soak SOAK=5m)")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 5*time.Minute { // two samples in each window at least
		t.Fatalf("CRIMUX_SOAK=%q: want a duration of at least 5m (60m, 5m)", v)
	}
	return d
}

// soakKillEvery is the range of the pauses between kills: 3–5 minutes;
// a run under 30 minutes kills every 1–1⅔ minutes, so that it too sees
// several crimux processes.
func soakKillEvery(d time.Duration) [2]time.Duration {
	if d >= 30*time.Minute {
		return [2]time.Duration{3 * time.Minute, 5 * time.Minute}
	}
	return [2]time.Duration{time.Minute, 100 * time.Second}
}

// soaker is one soak run.
type soaker struct {
	t           *testing.T
	c           *crimux
	ch          *chaos
	ctl         string
	metricsAddr string
	duration    time.Duration
	vm          soakPod // lives through the run
	begun       time.Time
	churn       time.Duration // how long the churn ran

	// Held under ch.mu (the killer changes them).
	process int       // 1 for the first crimux, one more per kill
	started time.Time // when the running crimux started
	kills   []time.Duration

	samples   []soak.Sample
	counts    soakCounts
	leaks     map[string]int // nil until counted
	recreated int
	published bool
}

// soakCounts is what the churn did.
type soakCounts struct {
	rounds, containerPods, vmPods, execs, snapshots, powerChanges int
}

// soakPod is a pod of the run.
type soakPod struct {
	i                  int
	vm                 bool
	name, podID, ctrID string
}

// killer SIGKILLs and restarts crimux after a pause in every (uniform)
// until stopped (stop may be called again).
func (s *soaker) killer(every [2]time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(every[0] + time.Duration(rand.Int63n(int64(every[1]-every[0])))):
			}
			s.kill()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// kill restarts crimux, the sampler held off (a restart that fails ends
// the test, and lets go of the lock).
func (s *soaker) kill() {
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	at := time.Since(s.begun)
	s.c.restart()
	s.process++
	s.started = time.Now()
	s.kills = append(s.kills, at)
	s.t.Logf("crimux SIGKILLed at minute %.1f, restarted (process %d)", at.Minutes(), s.process)
}

// longLivedVM starts the VM the snapshots and power changes are made on,
// and waits until its guest has booted.
func (s *soaker) longLivedVM() soakPod {
	p := soakPod{i: -1, vm: true}
	p.name, p.podID, p.ctrID = s.ch.up(p.i, true)
	v := &testVM{c: s.c, podID: p.podID, ctrID: p.ctrID, domain: domainOf(p.ctrID)}
	v.waitConsole(s.t, 0, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	s.ch.noteQemu(p.ctrID)
	s.counts.vmPods++
	return p
}

// round is one round of churn: two container pods and one or two VM
// pods up (at most three VMs at once with the long-lived one: two
// cores) and the VMs booted, an exec into each container, the long-lived VM snapshotted,
// paused and resumed, the round's pods down and whatever an earlier
// attempt left removed, as kubelet's garbage collection would.
func (s *soaker) round(n int) {
	pods := make([]soakPod, 3+n%2)
	var wg sync.WaitGroup
	for k := range pods {
		pods[k].i, pods[k].vm = 4*n+k, k >= 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &pods[k]
			p.name, p.podID, p.ctrID = s.ch.up(p.i, p.vm)
		}()
	}
	wg.Wait()
	for _, p := range pods {
		if p.vm { // booted: its console, virtlogd and the boot watch at work too
			v := &testVM{c: s.c, ctrID: p.ctrID}
			v.waitConsole(s.t, 0, bootTimeout, regexp.MustCompile(`(?m)^`+vmMarker))
			s.ch.noteQemu(p.ctrID)
			s.counts.vmPods++
		} else {
			s.exec(p.ctrID, n)
			s.counts.containerPods++
		}
	}
	s.vmOps(n)
	for _, p := range pods {
		if p.vm {
			s.ch.noteQemu(p.ctrID)
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.ch.down(p.name, p.podID, p.ctrID) }()
	}
	wg.Wait()
	s.removeAll(s.vm.podID)
	for _, p := range pods { // the pod's cgroup parent, as kubelet removes it
		for _, d := range cgroupDirs(fmt.Sprintf("%s/pod%d", s.ch.parent, p.i)) {
			_ = os.Remove(d) // a leaked leaf keeps it, and is counted at the end
		}
	}
	s.counts.rounds++
}

// exec runs a command in a container, streamed or (odd rounds) --sync.
func (s *soaker) exec(ctrID string, n int) {
	token := "soak-" + randomToken()
	args := []string{"exec", ctrID, "sh", "-c", "echo " + token}
	if n%2 == 1 {
		args = []string{"exec", "--sync", ctrID, "sh", "-c", "echo " + token}
	}
	s.ch.retry("crictl exec", func(context.Context) error {
		out, err := s.c.crictlErr(args...)
		if err != nil {
			return fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(out, token) {
			return fmt.Errorf("crictl %s printed %q", strings.Join(args, " "), out)
		}
		return nil
	})
	s.counts.execs++
}

// vmOps snapshots the long-lived VM (running, or paused in odd rounds),
// pauses and resumes it, and deletes the snapshot, each retried until
// it succeeds (a kill may cut any of them short: a create or delete that
// finished under a killed crimux answers AlreadyExists or NotFound when
// repeated).
func (s *soaker) vmOps(n int) {
	id, snap := s.vm.ctrID, fmt.Sprintf("soak-%d", n)
	if n%2 == 1 {
		s.ctlRetry(nil, "vm", "power", id, "paused")
	}
	s.ctlRetry([]string{"AlreadyExists"}, "vm", "snapshot", "create", id, snap)
	if n%2 == 0 {
		s.ctlRetry(nil, "vm", "power", id, "paused")
	}
	s.ctlRetry(nil, "vm", "power", id, "running")
	s.ctlRetry([]string{"NotFound"}, "vm", "snapshot", "delete", id, snap)
	s.counts.snapshots++
	s.counts.powerChanges += 2
}

// ctlRetry runs crimuxctl until it exits 0 or fails with one of okCodes.
func (s *soaker) ctlRetry(okCodes []string, args ...string) {
	s.ch.retry("crimuxctl "+strings.Join(args[:3], " "), func(context.Context) error {
		r := s.c.ctl(s.ctl, args...)
		if r.code == 0 {
			return nil
		}
		for _, code := range okCodes {
			if strings.Contains(r.stderr, "crimuxctl: "+code+": ") {
				return nil
			}
		}
		return fmt.Errorf("crimuxctl %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	})
}

// removeAll removes every pod of the run still listed but keep (a pod
// whose RunPodSandbox answer a kill lost, an attempt left not ready).
// Only this run's: other tests' pods share the bed's containerd.
func (s *soaker) removeAll(keep string) {
	s.ch.retry("remove leftover pods", func(ctx context.Context) error {
		l, err := s.ch.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Id == keep || !s.ours(p) {
				continue
			}
			if _, err := s.ch.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				return err
			}
			if _, err := s.ch.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				return err
			}
		}
		return nil
	})
}

// ours says whether a pod is this run's (chaos.up names them so).
func (s *soaker) ours(p *runtimeapi.PodSandbox) bool {
	return p.Metadata.GetNamespace() == "crimux-chaos" && strings.HasPrefix(p.Metadata.GetName(), fmt.Sprintf("chaos-%d-", s.ch.run))
}

// dropPods removes every pod of the run, once and best effort: crimux's
// VMs outlive crimux, so a run a failure cut short would otherwise leave
// them running, their state dir gone. After a run that ended, there are
// none.
func (s *soaker) dropPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := s.ch.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		s.t.Logf("the run's pods not removed: %v", err)
		return
	}
	for _, p := range l.Items {
		if s.ours(p) {
			_, _ = s.ch.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
			_, _ = s.ch.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
		}
	}
}

// checkLongLivedVM: after the churn, the long-lived VM still runs, booted
// once, with none of its snapshots left.
func (s *soaker) checkLongLivedVM() {
	t := s.t
	var resp struct {
		VM vmJSON `json:"vm"`
	}
	mustJSON(t, s.c.ctlOK(t, s.ctl, "-o", "json", "vm", "get", s.vm.ctrID), &resp)
	if resp.VM.PowerState != "POWER_STATE_RUNNING" || len(resp.VM.Snapshots) != 0 {
		t.Errorf("the long-lived VM after the churn: power %s, snapshots %+v; want running, none", resp.VM.PowerState, resp.VM.Snapshots)
	}
	s.ch.noteQemu(s.vm.ctrID)
	v := &testVM{c: s.c, ctrID: s.vm.ctrID}
	if n := v.count(vmMarker); n != 1 {
		t.Errorf("the long-lived VM booted %d times, want once", n)
	}
}
