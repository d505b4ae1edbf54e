package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/test/images/oci"
)

// seqLines counts, in a log, each SEQ-<n> the loop printed (the shell's
// echo of the typed loop, CRIMUX-SEQ-$i, does not count). Only the number
// counts: the guest's serial port under TCG mangles a character now and
// then ("CRIMUX-SSEQ-11", twice in CI, in qemu's own console.log as in
// the CRI log), which is the guest's, not a line lost or doubled.
func seqLines(log string) map[int]int {
	out := map[int]int{}
	for _, m := range regexp.MustCompile(`SEQ-(\d+)(?:\D|$)`).FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		out[n]++
	}
	return out
}

// requireEachOnce fails unless lines 0..n-1 are each in counts once.
func requireEachOnce(t *testing.T, where string, counts map[int]int, n int) {
	t.Helper()
	var lost, doubled []int
	for i := 0; i < n; i++ {
		switch {
		case counts[i] == 0:
			lost = append(lost, i)
		case counts[i] > 1:
			doubled = append(doubled, i)
		}
	}
	if len(lost) > 0 || len(doubled) > 0 {
		t.Errorf("%s: of %d console lines, lost %v, doubled %v", where, n, lost, doubled)
	}
}

// logAround logs the lines of log near the first CRIMUX-SEQ-<n> before
// and after a number that is missing or doubled, to tell how it went.
func logAround(t *testing.T, log string, counts map[int]int, n int) {
	t.Helper()
	lines := strings.Split(log, "\n")
	for i := 0; i < n; i++ {
		if counts[i] == 1 {
			continue
		}
		for j, l := range lines {
			if strings.Contains(l, fmt.Sprintf("SEQ-%d", max(i-1, 0))) {
				t.Logf("around CRIMUX-SEQ-%d:\n%q", i, lines[j:min(j+4, len(lines))])
				break
			}
		}
	}
}

// killDaemon SIGKILLs the daemon whose pid file is pidFile.
func killDaemon(t *testing.T, pidFile string) int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (%d): %v", pidFile, pid, err)
	}
	return pid
}

// TestVirtlogdKilledWhileGuestWrites: virtlogd, which holds every VM's
// console log, is SIGKILLed while a guest writes 300 numbered lines to its
// console, and started again (as systemd would): the VM keeps running, and
// its CRI log (what kubectl logs shows) has every line once — none lost,
// none doubled.
func TestVirtlogdKilledWhileGuestWrites(t *testing.T) {
	requireVM(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "virtlogd-kill")
	pid := qemuPID(t, v.domain)
	const n = 300
	v.typeLine(t, fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo CRIMUX-SEQ-$i; i=$((i+1)); sleep 0.02; done; echo CRIMUX-SEQ-END", n),
		2*time.Second, func() bool { return false })
	v.waitConsole(t, 0, 30*time.Second, regexp.MustCompile(`(?m)^CRIMUX-SEQ-50\r?$`))
	killDaemon(t, "/run/virtlogd.pid")
	time.Sleep(time.Second)
	libvirtUp(t) // starts virtlogd again, as systemd would
	testutil.Eventually(t, 90*time.Second, "the CRI log ends the sequence", func() error {
		if out := c.crictl("logs", v.ctrID); !regexp.MustCompile(`(?m)^CRIMUX-SEQ-END\r?$`).MatchString(out) {
			return fmt.Errorf("no CRIMUX-SEQ-END yet; log ends %q", out[max(0, len(out)-200):])
		}
		return nil
	})
	logs := c.crictl("logs", v.ctrID)
	counts := seqLines(logs)
	requireEachOnce(t, "the CRI log", counts, n)
	if t.Failed() {
		logAround(t, logs, counts, n)
		logAround(t, v.consoleLog(), seqLines(v.consoleLog()), n)
	}
	if got := qemuPID(t, v.domain); got != pid {
		t.Fatalf("qemu %d after virtlogd's kill, was %d", got, pid)
	}
}

// libvirtUp runs the bed's test/bed/libvirt-up.sh, which starts
// virtlogd and libvirtd where they do not run (and records them, so
// libvirt-down.sh stops them again).
func libvirtUp(t *testing.T) {
	t.Helper()
	up := exec.Command(filepath.Join(repoRoot(), "test/bed/libvirt-up.sh"))
	up.Env = append(os.Environ(), "TESTBED="+bed.testbed)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("libvirt-up.sh: %v\n%s", err, out)
	}
}

// burstPods is how many VM pods the libvirtd test makes at once.
const burstPods = 20

// callErrors keeps what failed calls returned, for the test to judge
// whether each was clear.
type callErrors struct {
	mu   sync.Mutex
	seen []string
}

func (e *callErrors) add(what string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, fmt.Sprintf("%s: %s: %s", what, status.Code(err), status.Convert(err).Message()))
}

// summary is each distinct error (pod names and IDs left out) with how
// many times it was seen.
func (e *callErrors) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := regexp.MustCompile(`chaos-\d+-\d+ |[0-9a-f]{32,64}`)
	counts := map[string]int{}
	var order []string
	for _, s := range e.seen {
		k := ids.ReplaceAllString(s, "")
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "%5d× %s\n", counts[k], k)
	}
	return b.String()
}

// unclear are the errors whose message is empty or, with unknownToo,
// whose gRPC code says nothing (Unknown). containerd's own errors pass
// through crimux as containerd gave them (critest holds crimux to
// that), Unknown ones too: for container pods only their message counts.
func (e *callErrors) unclear(unknownToo bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, s := range e.seen {
		if (unknownToo && strings.Contains(s, ": Unknown: ")) || strings.HasSuffix(s, ": ") {
			out = append(out, s)
		}
	}
	return out
}

// TestLibvirtdKilledDuringVMBurst: 20 VM pods made at once, each call
// retried as kubelet's sync loop would, while libvirtd is SIGKILLed 2 s
// into the burst and started again 3 s later: every pod ends with its VM
// running and booted once (one qemu, one boot marker), each call that
// failed meanwhile said why (a gRPC code other than Unknown), and once the
// pods are removed nothing is left (the chaos test's host counts: domains,
// disks, netns, cgroups, IPs).
func TestLibvirtdKilledDuringVMBurst(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--log-level", "info")
	c.crictl("pull", vmImage)
	parent := fmt.Sprintf("/crimux-faults/run%d", time.Now().UnixNano())
	t.Cleanup(func() { removeCgroupTree(parent) })
	ch := &chaos{t: t, c: c, parent: parent, run: time.Now().Unix() % 100000, qemu: map[string]map[int]bool{}}
	ch.rs, _ = c.client()
	before := hostCounts(t, c, parent)
	ch.cycle(-1, true) // the image's files, extracted before the burst
	var errs callErrors
	ch.onErr = errs.add

	pods, wait := ch.burst(burstPods, true)
	time.Sleep(2 * time.Second)
	killed := killDaemon(t, "/run/libvirtd.pid")
	time.Sleep(3 * time.Second)
	startLibvirtd(t)
	wait()
	t.Logf("libvirtd %d killed 2 s into a burst of %d VM pods; %d calls failed meanwhile", killed, burstPods, len(errs.seen))
	t.Logf("the failed calls:\n%s", errs.summary())
	if bad := errs.unclear(true); len(bad) > 0 {
		t.Errorf("%d calls failed without saying why:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	for _, p := range pods {
		v := &testVM{c: c, podID: p.podID, ctrID: p.ctrID, domain: domainOf(p.ctrID)}
		v.waitConsole(t, 0, 3*time.Minute, regexp.MustCompile(`(?m)^`+vmMarker))
		ch.noteQemu(p.ctrID)
	}
	time.Sleep(2 * time.Second) // a VM started twice would show it now
	for _, p := range pods {
		v := &testVM{c: c, ctrID: p.ctrID}
		ch.noteQemu(p.ctrID)
		if n := v.count(vmMarker); n != 1 || len(ch.qemu[p.ctrID]) != 1 {
			t.Errorf("VM %s of %s booted %d times, ran as qemu %v", p.ctrID, p.name, n, ch.qemu[p.ctrID])
		}
	}
	for _, p := range pods {
		ch.down(p.name, p.podID, p.ctrID)
	}
	ch.removeAll()
	c.restart() // the start-up collector pass
	after := settledCounts(t, c, parent, before, settleTimeout)
	for _, k := range []string{"domains", "disks", "netns", "cgroups", "ips"} {
		if after[k] > before[k] {
			t.Errorf("leaked %s: before %d, after %d", k, before[k], after[k])
		}
	}
}

// restartContainerd SIGKILLs the bed's containerd and starts it again
// after pause, as systemd would (test/bed/up.sh).
func restartContainerd(t *testing.T, pause time.Duration) {
	t.Helper()
	killDaemon(t, filepath.Join(bed.runDir, bedInstance("containerd")+".pid"))
	time.Sleep(pause)
	up := exec.Command(filepath.Join(repoRoot(), "test/bed/up.sh"))
	up.Env = append(os.Environ(), "TESTBED="+bed.testbed)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("restart containerd: %v\n%s", err, out)
	}
}

// TestContainerdKilledDuringPull: containerd is SIGKILLed while a pull
// through crimux downloads a 96 MiB layer no one has pulled before (an
// image made for the test and served by the bed's registry), and started
// again: the pull fails with a clear error (Unavailable), the pull kubelet
// tries next succeeds, and the image is the one served (its manifest
// digest).
func TestContainerdKilledDuringPull(t *testing.T) {
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	start := time.Now()
	ref, digest := freshImage(t, 96<<20)
	t.Logf("image made in %v", time.Since(start).Round(time.Millisecond))
	pulled := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = c.crictlErr("pull", ref)
		pulled <- err
	}()
	waitIngest(10 * time.Second) // the pull is writing the layer
	killAt := time.Now()
	restartContainerd(t, 2*time.Second)
	t.Logf("containerd killed %v into the pull, back %v later", killAt.Sub(start).Round(time.Millisecond), time.Since(killAt).Round(time.Millisecond))
	if err := <-pulled; err == nil {
		t.Fatal("the pull finished before containerd was killed: nothing was cut short")
	} else if !strings.Contains(out, "Unavailable") {
		t.Errorf("the pull cut short by containerd's kill: %v %s; want Unavailable", err, out)
	} else {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("the pull cut short: %s", lines[len(lines)-1])
	}
	back := time.Now()
	testutil.Eventually(t, 2*time.Minute, "the pull done again", func() error {
		_, err := c.crictlErr("pull", ref)
		return err
	})
	t.Logf("pulled again %v after containerd's restart", time.Since(back).Round(time.Millisecond))
	if got := c.crictl("inspecti", "-o", "json", ref); !strings.Contains(got, digest) {
		t.Fatalf("the image pulled again is not %s:\n%.500s", digest, got)
	}
	c.crictl("rmi", ref)
}

// freshImage serves an image of one layer of size random bytes under a
// repository of its own in the bed's registry (removed at cleanup), and
// returns its reference and manifest digest.
func freshImage(t *testing.T, size int) (ref, digest string) {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	// An uncompressed layer: gzip of random bytes costs a minute under
	// -race and saves nothing.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Name: "random", Mode: 0o644, Size: int64(size), ModTime: oci.Epoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil || tw.Close() != nil {
		t.Fatal(err)
	}
	blob := oci.NewBlob("application/vnd.oci.image.layer.v1.tar", tb.Bytes())
	layer := oci.Layer{Blob: blob, DiffID: blob.Digest}
	repo := fmt.Sprintf("crimux/e2e-pull-%d", time.Now().UnixNano())
	img := oci.Build(oci.ImageSpec{ID: repo, Refs: []string{repo + ":latest"}, Layers: []oci.SpecLayer{{Layer: layer, CreatedBy: "test"}}})
	w := oci.NewLayoutWriter(filepath.Join(bed.testbed, "images"))
	if err := w.Add(repo+":latest", img); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(bed.testbed, "images", repo)) })
	return "127.0.0.1:5117/" + repo + ":latest", img.Root().Digest
}

// TestContainerdKilledDuringPodBurst: 10 container pods made at once
// through crimux, each call retried as kubelet would, while containerd is
// SIGKILLed 1 s into the burst and started again 2 s later: every pod ends
// with its container running, each failed call said why, and once the pods
// are removed nothing is left (netns, cgroups, IPs).
func TestContainerdKilledDuringPodBurst(t *testing.T) {
	requireBed(t)
	c := startCrimux(t, bed.containerd, "--log-level", "info")
	c.crictl("pull", busyboxImage)
	parent := fmt.Sprintf("/crimux-faults/run%d", time.Now().UnixNano())
	t.Cleanup(func() { removeCgroupTree(parent) })
	ch := &chaos{t: t, c: c, parent: parent, run: time.Now().Unix() % 100000, qemu: map[string]map[int]bool{}}
	ch.rs, _ = c.client()
	before := hostCounts(t, c, parent)
	var errs callErrors
	ch.onErr = errs.add
	pods, wait := ch.burst(10, false)
	time.Sleep(time.Second)
	restartContainerd(t, 2*time.Second)
	wait()
	t.Logf("containerd killed 1 s into a burst of %d container pods; %d calls failed meanwhile", len(pods), len(errs.seen))
	t.Logf("the failed calls:\n%s", errs.summary())
	if bad := errs.unclear(false); len(bad) > 0 {
		t.Errorf("%d calls failed without saying why:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	for _, p := range pods {
		if out := c.crictl("inspect", "-o", "json", p.ctrID); !strings.Contains(out, "CONTAINER_RUNNING") {
			t.Errorf("container %s of %s is not running: %.300s", p.ctrID, p.name, out)
		}
	}
	for _, p := range pods {
		ch.down(p.name, p.podID, p.ctrID)
	}
	ch.removeAll()
	c.restart()
	after := settledCounts(t, c, parent, before, settleTimeout)
	for _, k := range []string{"netns", "cgroups", "ips"} {
		if after[k] > before[k] {
			t.Errorf("leaked %s: before %d, after %d", k, before[k], after[k])
		}
	}
}

// waitIngest waits (up to timeout) until the bed's containerd is writing
// a download into its content store.
func waitIngest(timeout time.Duration) {
	dir := "/var/lib/crimux-testbed/containerd/io.containerd.content.v1.content/ingest"
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if e, _ := os.ReadDir(dir); len(e) > 0 {
			return
		}
	}
}

// burstPod is one pod of a burst.
type burstPod struct{ name, podID, ctrID string }

// burst brings n pods up at once, each with ch.up (every call retried as
// kubelet would); wait returns once all run, pods filled in by then.
func (ch *chaos) burst(n int, isVM bool) (pods []burstPod, wait func()) {
	pods = make([]burstPod, n)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &pods[i]
			p.name, p.podID, p.ctrID = ch.up(i, isVM)
		}()
	}
	return pods, wg.Wait
}
