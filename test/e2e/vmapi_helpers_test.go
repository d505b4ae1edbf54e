package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// Helpers of the VM API's e2e tests: crimuxctl, a running test VM, and its
// serial console (typing into the guest's shell, reading what it printed).

// ctlBin is the crimuxctl binary: $CRIMUX_CTL (make sets it to
// bin/crimuxctl), else built for the test.
func ctlBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CRIMUX_CTL"); p != "" {
		return p
	}
	p := filepath.Join(t.TempDir(), "crimuxctl")
	if out, err := exec.Command("go", "build", "-o", p, "github.com/crimux/crimux/cmd/crimuxctl").CombinedOutput(); err != nil {
		t.Fatalf("build crimuxctl: %v\n%s", err, out)
	}
	return p
}

// ctlResult is one crimuxctl run.
type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctl runs crimuxctl against c.
func (c *crimux) ctl(bin string, args ...string) ctlResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--endpoint", c.endpoint}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return ctlResult{code: code, stdout: strings.TrimSpace(stdout.String()), stderr: strings.TrimSpace(stderr.String())}
}

// ctlOK runs crimuxctl and fails the test unless it exits 0.
func (c *crimux) ctlOK(t *testing.T, bin string, args ...string) string {
	t.Helper()
	r := c.ctl(bin, args...)
	if r.code != 0 {
		t.Fatalf("crimuxctl %s: exit %d\n%s\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// ctlFails runs crimuxctl, wanting exit 1 with the gRPC code and every
// word in its error.
func (c *crimux) ctlFails(t *testing.T, bin, code string, words []string, args ...string) {
	t.Helper()
	r := c.ctl(bin, args...)
	if r.code != 1 {
		t.Fatalf("crimuxctl %s: exit %d, want 1 (%s)\n%s\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	for _, w := range append([]string{"crimuxctl: " + code + ": "}, words...) {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("crimuxctl %s: error does not say %q:\n%s", strings.Join(args, " "), w, r.stderr)
		}
	}
	t.Logf("crimuxctl %s -> %s", strings.Join(args, " "), r.stderr)
}

// bootTimeout bounds a boot of the test VM: about 2.5 s of TCG on an idle
// host, far more on a host busy with other VMs.
const bootTimeout = 90 * time.Second

// testVM is a running VM pod of a test.
type testVM struct {
	c            *crimux
	podID, ctrID string
	domain       string
	// podJSON is the pod's crictl config, where a test keeps it.
	podJSON string
}

// startTestVM runs the test VM image in a VM pod and waits until its
// guest has booted and mounted its disk. The pod is removed at cleanup.
func startTestVM(t *testing.T, c *crimux, name string) *testVM {
	t.Helper()
	return startTestVMOf(t, c, name, vmImage)
}

// startTestVMOf is startTestVM of image, a VM image with the test VM's
// files (vmImage, vmImageOther).
func startTestVMOf(t *testing.T, c *crimux, name, image string) *testVM {
	t.Helper()
	c.crictl("pull", image)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, name, parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, image, vmMemory, ""), pod)
	c.crictl("start", ctrID)
	v := &testVM{c: c, podID: podID, ctrID: ctrID, domain: domainOf(ctrID)}
	t.Cleanup(func() {
		if t.Failed() {
			log := v.consoleLog()
			t.Logf("console of %s, last 3000 bytes:\n%s", v.domain, log[max(0, len(log)-3000):])
		}
	})
	v.waitConsole(t, 0, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	return v
}

// consoleLog is the VM's whole serial console, as virtlogd wrote it.
func (v *testVM) consoleLog() string {
	b, _ := os.ReadFile(filepath.Join(v.c.stateDir, "vms", strings.TrimPrefix(v.ctrID, "vm--"), "console.log"))
	return string(b)
}

// consoleSize is where the console log ends now.
func (v *testVM) consoleSize() int { return len(v.consoleLog()) }

// waitConsole waits for re in the console after offset from and returns
// its first submatch (or the match).
func (v *testVM) waitConsole(t *testing.T, from int, timeout time.Duration, re *regexp.Regexp) string {
	t.Helper()
	var got string
	testutil.Eventually(t, timeout, fmt.Sprintf("console shows %s", re), func() error {
		log := v.consoleLog()
		if from > len(log) {
			from = 0 // replaced
		}
		m := re.FindStringSubmatch(completeLines(log[from:]))
		if m == nil {
			tail := log[max(0, len(log)-300):]
			return fmt.Errorf("console so far ends with %q", tail)
		}
		got = m[len(m)-1]
		return nil
	})
	return got
}

// count is how many console lines start with marker.
func (v *testVM) count(marker string) int {
	return len(regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(marker)).FindAllStringIndex(completeLines(v.consoleLog()), -1))
}

// completeLines is log up to its last newline: virtlogd writes what the
// guest's serial port gave it, so the log may end in the middle of a
// line, and a pattern matched against that half line reads a value cut
// short (a disk marker "pow" for "power-d5ccefef").
func completeLines(log string) string {
	return log[:strings.LastIndexByte(log, '\n')+1]
}

// typeLine types one line into the guest's shell through the console
// socket (qemu serves one client at a time; each line connects anew, so a
// new qemu process after a restore is reached too). A Ctrl-C first
// abandons whatever a lost or cut line left on the shell's prompt. The
// connection stays open until done says so (or for at most wait): qemu
// drops what it has not passed to the guest yet when the client hangs up,
// and a slow guest (TCG on a busy host) reads its serial port slowly.
//
// What the guest writes meanwhile is read off the connection and
// dropped (the test reads console.log): qemu writes the serial port a
// byte at a time, so a client that does not read fills the socket after
// a few hundred bytes, and qemu 7.2 then logs each byte it must retry
// twice (qemu_chr_write_buffer logs a write that failed with EAGAIN as if
// it were lost for good): "CRIMUX-R-2228889b3" for "CRIMUX-R-228889b3".
func (v *testVM) typeLine(t *testing.T, line string, wait time.Duration, done func() bool) {
	t.Helper()
	sock := filepath.Join(v.c.stateDir, "vms", strings.TrimPrefix(v.ctrID, "vm--"), "run", "console.sock")
	var conn net.Conn
	testutil.Eventually(t, within(t, 10*time.Second), "connect to the console socket", func() error {
		var err error
		conn, err = net.DialTimeout("unix", sock, time.Second)
		return err
	})
	defer conn.Close()
	go func() { _, _ = io.Copy(io.Discard, conn) }()
	if _, err := conn.Write([]byte{3}); err != nil { // ^C: the tty flushes its input on it,
		t.Fatalf("type into the console: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // so the line goes after it
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("type into the console: %v", err)
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && !done() {
		time.Sleep(100 * time.Millisecond)
	}
}

// guestRun runs a shell command in the guest and returns "<exit status>:"
// followed by $O (see guestOutput). The result line is built so that the
// echo of the typed line never matches it, and it ends with its tag
// again: a line the tty's echo of another typing got mixed into, or one
// cut short, is not taken for an answer. A line typed while the shell
// is not reading (it starts just after the boot markers) is lost, so an
// unanswered line is typed again (commands must be idempotent).
func (v *testVM) guestRun(t *testing.T, cmd string) string {
	t.Helper()
	var tags []string
	from := v.consoleSize()
	for attempt := 1; ; attempt++ {
		tag := randomToken()
		// A slow guest may answer an earlier typing of the same
		// (idempotent) command after its wait ended: any of them counts.
		tags = append(tags, tag)
		re := resultPattern(tags)
		var got string
		wait := 30 * time.Second
		if attempt == 1 {
			wait = 8 * time.Second // lost lines are common only right after a boot
		}
		v.typeLine(t, fmt.Sprintf(`O=; %s; echo "CRIMUX-R""-%s:$?:$O:%s"`, cmd, tag, tag), wait, func() bool {
			if log := v.consoleLog(); from <= len(log) {
				got = resultLine(log[from:], re)
			}
			return got != ""
		})
		if got != "" {
			return got
		}
		if attempt == 3 {
			log := v.consoleLog()
			t.Fatalf("guest did not answer %q, typed 3 times; console ends with %q", cmd, log[max(0, len(log)-500):])
		}
		t.Logf("guest did not answer %q (attempt %d); typing it again", cmd, attempt)
	}
}

// resultPattern matches a whole result line of any of tags: the line
// starts and ends with its tag (RE2 has no back-references, hence one
// alternative, and one group, per tag).
func resultPattern(tags []string) *regexp.Regexp {
	alt := make([]string, len(tags))
	for i, tag := range tags {
		alt[i] = `CRIMUX-R-` + tag + `:(\d+:[^\r\n]*):` + tag
	}
	return regexp.MustCompile(`(?m)^(?:` + strings.Join(alt, "|") + `)\r?\n`)
}

// resultLine is "<exit status>:$O" from the first result line in log that
// re (a resultPattern) matches, or "".
func resultLine(log string, re *regexp.Regexp) string {
	m := re.FindStringSubmatch(log)
	for _, g := range m[min(1, len(m)):] {
		if g != "" {
			return g
		}
	}
	return ""
}

// guestOutput runs cmd in the guest and returns its first output line.
func (v *testVM) guestOutput(t *testing.T, cmd string) string {
	t.Helper()
	out := v.guestRun(t, fmt.Sprintf(`O="$(%s)"`, cmd))
	status, value, _ := strings.Cut(out, ":")
	if status != "0" {
		t.Fatalf("guest command %q failed with status %s", cmd, status)
	}
	return value
}

// lastUptime waits for the guest's next CRIMUX-UPTIME line after from
// and returns its value.
func (v *testVM) lastUptime(t *testing.T, from int) float64 {
	t.Helper()
	s := v.waitConsole(t, from, 15*time.Second, regexp.MustCompile(`(?m)^CRIMUX-UPTIME: ([0-9.]+)`))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("uptime %q: %v", s, err)
	}
	return f
}

// criState is the container's state and reason as crictl inspect shows.
func (v *testVM) criState(t *testing.T) (state, reason string) {
	t.Helper()
	var insp struct {
		Status struct {
			ID     string `json:"id"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"status"`
	}
	mustJSON(t, v.c.crictl("inspect", "-o", "json", v.ctrID), &insp)
	if insp.Status.ID != v.ctrID {
		t.Fatalf("crictl inspect %s shows container %q", v.ctrID, insp.Status.ID)
	}
	return insp.Status.State, insp.Status.Reason
}

// requireRunningAs asserts the CRI container runs with the power reason
// wanted ("" while Running).
func (v *testVM) requireRunningAs(t *testing.T, reason string) {
	t.Helper()
	state, got := v.criState(t)
	if state != "CONTAINER_RUNNING" || got != reason {
		t.Fatalf("crictl inspect: state %s reason %q; want CONTAINER_RUNNING reason %q", state, got, reason)
	}
}

// watchPS polls crictl ps until the returned stop is called (or the test
// ends) and fails the test if the pod's container was ever anything but
// the one running container it started as.
func (v *testVM) watchPS(t *testing.T) (stop func()) {
	t.Helper()
	quit, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var bad []string
	polls := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(500 * time.Millisecond):
			}
			out, err := v.c.crictlErr("ps", "-a", "-o", "json", "--pod", v.podID)
			if err != nil {
				continue // crictl itself timing out is not the VM's state
			}
			var list struct {
				Containers []struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"containers"`
			}
			mu.Lock()
			polls++
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				bad = append(bad, "unparsable crictl ps: "+err.Error())
			} else if len(list.Containers) != 1 || list.Containers[0].ID != v.ctrID || list.Containers[0].State != "CONTAINER_RUNNING" {
				bad = append(bad, fmt.Sprintf("%s: %+v", time.Now().Format("15:04:05.000"), list.Containers))
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			<-done
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Errorf("crictl ps did not show %s as the pod's one running container (%d of %d polls):\n%s",
					v.ctrID, len(bad), polls, strings.Join(bad, "\n"))
			} else {
				t.Logf("crictl ps showed %s running in all %d polls", v.ctrID, polls)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func randomToken() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// wrapperInstalls holds, per wrapper path, its one install of the run.
var wrapperInstalls sync.Map // path -> *wrapperInstall

type wrapperInstall struct {
	once sync.Once
	err  error
}

// installQemuWrapper builds a qemu wrapper that asks placement and
// installs it at path when it changed (or qemu is newer: libvirt caches
// qemu's capabilities by the emulator's ctime).
func installQemuWrapper(t *testing.T, path, placement string) {
	t.Helper()
	v, _ := wrapperInstalls.LoadOrStore(path, &wrapperInstall{})
	w := v.(*wrapperInstall)
	w.once.Do(func() { w.err = buildQemuWrapper(path, placement) })
	if w.err != nil {
		t.Fatal(w.err)
	}
}

func buildQemuWrapper(path, placement string) error {
	dir, err := os.MkdirTemp("", "crimux-vmapi-wrapper")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	built := filepath.Join(dir, "wrapper")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.placementSocket="+placement,
		"-o", built, "github.com/crimux/crimux/cmd/crimux-qemu-wrapper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the qemu wrapper %s: %v\n%s", path, err, out)
	}
	data, err := os.ReadFile(built)
	if err != nil {
		return err
	}
	old, oerr := os.ReadFile(path)
	qemu, qerr := os.Stat("/usr/bin/qemu-system-x86_64")
	inst, ierr := os.Stat(path)
	if oerr == nil && bytes.Equal(old, data) && qerr == nil && ierr == nil && !qemu.ModTime().After(inst.ModTime()) {
		return nil
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("install the qemu wrapper %s (make bed makes its directory): %w", path, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// startVMAPICrimux starts crimux (TCG) with the VM API tests' wrapper.
func startVMAPICrimux(t *testing.T) *crimux {
	t.Helper()
	return startVMAPICrimuxWith(t, "")
}

// startVMAPICrimuxWith is startVMAPICrimux of crimux binary bin ("": the
// one under test). Its VMs run through a qemu wrapper of its own
// (ownPlacement), so they are placed whatever crimux runs beside it.
func startVMAPICrimuxWith(t *testing.T, bin string, extraArgs ...string) *crimux {
	t.Helper()
	return startCrimuxBin(t, bin, bed.containerd, append([]string{"--vm-accel", "tcg"}, extraArgs...)...)
}

// startWrappedCrimux starts crimux bin (TCG) with the qemu wrapper at
// wrapper, built to ask placement.
func startWrappedCrimux(t *testing.T, wrapper, placement, bin string, extraArgs ...string) *crimux {
	t.Helper()
	installQemuWrapper(t, wrapper, placement)
	if err := os.MkdirAll(filepath.Dir(placement), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeJSON(t, "crimux.toml", fmt.Sprintf("[libvirt]\nemulator = %q\nplacement_socket = %q\n", wrapper, placement))
	return startCrimuxBin(t, bin, bed.containerd, append([]string{"--vm-accel", "tcg", "--config", cfg}, extraArgs...)...)
}

// startVMAPICrimuxState is startVMAPICrimux on a state dir of the test's.
func startVMAPICrimuxState(t *testing.T, stateDir string) *crimux {
	t.Helper()
	return startVMAPICrimuxWith(t, "", "--state-dir", stateDir)
}
