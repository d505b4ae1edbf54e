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

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMGuest (make e2e-guest): a stock-style cloud guest as a
// VM pod through crimux with crictl, booted once: Debian from its own disk,
// its hostname, user-data and SSH key from crimux's cloud-init volume;
// crictl exec (streaming and --sync, stdin, exit codes) through the guest
// agent; crictl port-forward to its sshd and ssh in with the key; the
// serial console through crictl attach; the CRI log reopened; the
// container events; the pod's DNS options in its resolv.conf; and a
// graceful stop that is a clean ACPI shutdown.
func TestVMGuest(t *testing.T) {
	c := startGuestCrimux(t, "e2e-guest")
	events := watchEvents(t, c)
	key, pub := sshKey(t)
	userData := "#cloud-config\nwrite_files:\n  - path: /etc/ssh-marker\n    content: " + guestMarker + "\n"
	parent := testCgroupParent(t)
	pod := guestPodJSON(t, parent, userData, pub)
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	shared := t.TempDir()
	writeFile(t, filepath.Join(shared, "hello"), guestMarker+"-SHARED")
	ctrID, err := c.crictlTimeout(10*time.Minute, "create", podID, guestContainerJSON(t, shared, loopDevice(t, 8<<20)), pod)
	if err != nil {
		t.Fatalf("crictl create: %v\n%s", err, ctrID)
	}
	start := time.Now()
	c.crictl("start", ctrID)
	if xml := virsh(t, "dumpxml", domainOf(ctrID)); strings.Contains(xml, "<kernel>") || !strings.Contains(xml, "<boot dev='hd'/>") {
		t.Fatalf("the Debian guest must boot from its disk, not a kernel of the image:\n%s", xml)
	}

	// The guest agent answers once systemd started it; cloud-init is done
	// a while later.
	testutil.Eventually(t, guestBootTimeout, "the guest agent answering crictl exec", func() error {
		out, err := c.crictlErr("exec", "--sync", "--timeout", "10", ctrID, "true")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	t.Logf("guest agent answers %v after crictl start", time.Since(start).Round(time.Second))
	if out, err := c.crictlTimeout(guestBootTimeout, "exec", "--sync", "--timeout", "480", ctrID, "cloud-init", "status", "--wait"); err != nil {
		t.Fatalf("cloud-init status --wait: %v\n%s\nconsole:\n%s", err, out, tail(c.crictl("logs", ctrID), 40))
	}
	t.Logf("cloud-init done %v after crictl start", time.Since(start).Round(time.Second))

	// The pod's DNS config, options too: vendor-data wrote the pod's
	// resolv.conf in place of the guest's own.
	if got := c.crictl("exec", ctrID, "cat", "/etc/resolv.conf"); !strings.Contains(got, "nameserver 10.96.0.10\n") ||
		!strings.Contains(got, "search crimux-e2e.svc.cluster.local\n") || !strings.HasSuffix(got, "options "+guestDNSOptions) {
		t.Fatalf("/etc/resolv.conf in the guest:\n%s\nwant the pod's servers, searches and options %q", got, guestDNSOptions)
	}
	// The pod's directory mount: cloud-init (vendor-data) mounted the
	// virtio-fs share at its container path, read-only.
	if got := c.crictl("exec", ctrID, "cat", "/srv/shared/hello"); got != guestMarker+"-SHARED" {
		t.Fatalf("/srv/shared/hello in the guest = %q, want the host file's %q", got, guestMarker+"-SHARED")
	}
	if out, err := c.crictlErr("exec", ctrID, "touch", "/srv/shared/x"); err == nil {
		t.Fatalf("touch in the read-only share succeeded: %s", out)
	}
	// The pod's block device, by the serial its container path gives it.
	if out := c.crictl("exec", ctrID, "ls", "/dev/disk/by-id/"); !strings.Contains(out, "virtio-dev-xvdb") {
		t.Fatalf("/dev/disk/by-id in the guest lacks virtio-dev-xvdb:\n%s", out)
	}

	// exec: hostname and user-data from the cidata volume, exit codes,
	// stdin; a TTY is refused pointing at attach and SSH.
	if got := c.crictl("exec", ctrID, "hostname"); got != guestHostname {
		t.Fatalf("crictl exec hostname = %q, want the pod's hostname %q", got, guestHostname)
	}
	if got := c.crictl("exec", ctrID, "cat", "/etc/ssh-marker"); got != guestMarker {
		t.Fatalf("/etc/ssh-marker = %q, want what user-data wrote (%q)", got, guestMarker)
	}
	// The exit code reaches crictl both ways; crictl v1.37 itself exits 1
	// and prints the command's code (it does so against containerd too;
	// kubectl exec exits with the code).
	for _, mode := range []struct {
		args []string
		want string
	}{
		{[]string{"--sync"}, "exited with 3"},
		{nil, "command terminated with exit code 3"},
	} {
		args := append(append([]string{"exec"}, mode.args...), ctrID, "sh", "-c", "echo out; echo err >&2; exit 3")
		out, err := c.crictlErr(args...)
		if err == nil || !strings.Contains(out, mode.want) || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
			t.Fatalf("crictl %s: %v, output %q; want exit code 3 reported, with stdout and stderr", strings.Join(args, " "), err, out)
		}
	}
	if out, err := c.crictlCmd(context.Background(), strings.NewReader("from stdin\n"), "exec", "-i", ctrID, "cat"); err != nil || out != "from stdin" {
		t.Fatalf("crictl exec -i cat: %q, %v; want stdin echoed", out, err)
	}
	if out, err := c.crictlErr("exec", "-it", ctrID, "sh"); err == nil || !strings.Contains(out, "attach") {
		t.Fatalf("crictl exec -it: %v, %q; want a refusal pointing at attach", err, out)
	}

	// port-forward to sshd; ssh in with the key of the annotation.
	local := portForward(t, c, podID, 22)
	testutil.Eventually(t, 2*time.Minute, "ssh through crictl port-forward", func() error {
		out, err := exec.Command("ssh", "-i", key, "-p", strconv.Itoa(local), "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
			debianUser+"@127.0.0.1", "id", "-un").CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), debianUser) {
			return fmt.Errorf("ssh: %v: %s", err, out)
		}
		return nil
	})

	// The serial console: crictl attach reaches getty; after the CRI log is
	// renamed and reopened, the console goes on in the new file.
	attachUntil(t, c, ctrID, "\n", "login:", time.Minute)
	logPath := criLogPath(t, c, ctrID)
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	rt, _ := c.client()
	if _, err := rt.ReopenContainerLog(context.Background(), &runtimeapi.ReopenContainerLogRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	attachUntil(t, c, ctrID, "\n", "login:", time.Minute)
	testutil.Eventually(t, 30*time.Second, "console output in the reopened log", func() error {
		data, err := os.ReadFile(logPath)
		if err != nil || !strings.Contains(string(data), "login:") {
			return fmt.Errorf("%v: %q", err, data)
		}
		return nil
	})

	// A graceful stop: ACPI power-off, the guest shuts down cleanly within
	// the timeout, exit code 0 and reason Completed.
	stopStart := time.Now()
	if out, err := c.crictlTimeout(2*time.Minute, "stop", "--timeout", "30", ctrID); err != nil {
		t.Fatalf("crictl stop: %v\n%s", err, out)
	}
	took := time.Since(stopStart)
	code, reason := exitOf(t, c, ctrID)
	if code != 0 || reason != "Completed" || took > 32*time.Second {
		t.Fatalf("crictl stop --timeout 30: exit %d reason %q after %v; want a clean shutdown (0, Completed) within the timeout\nconsole:\n%s",
			code, reason, took, tail(c.crictl("logs", ctrID), 30))
	}
	t.Logf("clean ACPI shutdown in %v", took.Round(100*time.Millisecond))
	c.crictl("rm", ctrID)
	testutil.Eventually(t, 10*time.Second, "CREATED, STARTED, STOPPED and DELETED events", func() error {
		got := strings.Join(events.of(ctrID), " ")
		want := "CONTAINER_CREATED_EVENT CONTAINER_STARTED_EVENT CONTAINER_STOPPED_EVENT CONTAINER_DELETED_EVENT"
		if got != want {
			return fmt.Errorf("events %q, want %q", got, want)
		}
		return nil
	})
	c.crictl("rmp", "-f", podID)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domainOf(ctrID)) {
		t.Fatalf("domain %s left after rmp:\n%s", domainOf(ctrID), out)
	}
}

// criLogPath is the container's CRI log file.
func criLogPath(t *testing.T, c *crimux, ctrID string) string {
	t.Helper()
	var insp struct {
		Status struct {
			LogPath string `json:"logPath"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &insp)
	if insp.Status.LogPath == "" {
		t.Fatal("crictl inspect shows no log path")
	}
	return insp.Status.LogPath
}

// exitOf is the exit code and reason crictl inspect shows.
func exitOf(t *testing.T, c *crimux, ctrID string) (int, string) {
	t.Helper()
	var insp struct {
		Status struct {
			ExitCode int    `json:"exitCode"`
			Reason   string `json:"reason"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &insp)
	return insp.Status.ExitCode, insp.Status.Reason
}
