package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The usable guest (test/guest/build.sh, served as crimux/vm-debian): Debian
// 12 booting from its own disk, with cloud-init, qemu-guest-agent and sshd.
const (
	debianImage   = "127.0.0.1:5117/crimux/vm-debian:latest"
	debianUser    = "debian" // Debian's cloud-init default user
	guestMemory   = 1 << 30
	guestMarker   = "crimux-user-data-ran"
	guestHostname = "guest-0"
)

// guestBootTimeout: under TCG the Debian guest takes minutes to boot and
// run cloud-init (longer inside the test node, see slowed).
var guestBootTimeout = slowed(8 * time.Minute)

// startGuestCrimux skips the test unless CRIMUX_GUEST is set (make
// target runs it), and starts crimux (TCG, and args) with the Debian guest
// pulled.
func startGuestCrimux(t *testing.T, target string, args ...string) *crimux {
	t.Helper()
	if os.Getenv("CRIMUX_GUEST") == "" {
		t.Skipf("the Debian guest boots for minutes under TCG: make %s runs this test (CRIMUX_GUEST=1)", target)
	}
	requireVM(t)
	c := startCrimux(t, bed.containerd, append([]string{"--vm-accel", "tcg"}, args...)...)
	if out, err := c.crictlTimeout(10*time.Minute, "pull", debianImage); err != nil {
		t.Fatalf("crictl pull %s: %v\n%s", debianImage, err, out)
	}
	return c
}

// crictlTimeout runs crictl with a longer deadline than crictl does (the
// Debian image is hundreds of MiB: its first pull and create take long).
func (c *crimux) crictlTimeout(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.crictlCmd(ctx, nil, append([]string{"--timeout", d.String()}, args...)...)
}

// sshKey makes an ed25519 key pair; it returns the private key's path and
// the public key.
func sshKey(t *testing.T) (string, string) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "crimux-e2e", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen (openssh-client): %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return key, strings.TrimSpace(string(pub))
}

// guestDNSOptions are the guest pod's resolver options: kubelet's ndots,
// and a short wait for a name server the guest cannot reach.
const guestDNSOptions = "ndots:5 timeout:1 attempts:1"

// guestPodJSON is a VM pod with a network, a hostname, a DNS config with
// options, and the user-data and SSH key annotations.
func guestPodJSON(t *testing.T, parent, userData, pubKey string) string {
	return writeJSON(t, "guestpod.json", fmt.Sprintf(`{
  "metadata": {"name": "guest", "namespace": "crimux-e2e", "uid": "guest-uid-%d", "attempt": 0},
  "hostname": %q,
  "dns_config": {"servers": ["10.96.0.10"], "searches": ["crimux-e2e.svc.cluster.local"], "options": ["ndots:5", "timeout:1", "attempts:1"]},
  "log_directory": %q,
  "annotations": {"crimux.io/cloud-init-user-data": %q, "crimux.io/ssh-authorized-keys": %q},
  "linux": {"cgroup_parent": %q}
}`, time.Now().UnixNano(), guestHostname, t.TempDir(), userData, pubKey, parent))
}

// guestContainerJSON: two vCPUs (TCG runs one host thread each) and 1 GiB,
// with shared, a host directory, mounted read-only at /srv/shared (cloud-init
// mounts it in the guest) and the block device dev at /dev/xvdb.
func guestContainerJSON(t *testing.T, shared, dev string) string {
	return writeJSON(t, "guestctr.json", fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "mounts": [{"container_path": "/srv/shared", "host_path": %q, "readonly": true}],
  "devices": [{"container_path": "/dev/xvdb", "host_path": %q, "permissions": "mrw"}],
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 200000, "memory_limit_in_bytes": %d}}
}`, debianImage, shared, dev, guestMemory))
}

// eventLog records the container events crimux streams.
type eventLog struct {
	mu     sync.Mutex
	events []string // "<container ID> <type>"
}

// watchEvents streams GetContainerEvents into an eventLog until the test ends.
func watchEvents(t *testing.T, c *crimux) *eventLog {
	t.Helper()
	rt, _ := c.client()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.events = append(l.events, ev.GetContainerId()+" "+ev.GetContainerEventType().String())
			l.mu.Unlock()
		}
	}()
	return l
}

// of lists the event types seen for container id, in order.
func (l *eventLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		if rest, ok := strings.CutPrefix(e, id+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}

// attachUntil runs crictl attach -i on ctrID, types input into the serial
// console and reads it until want shows (or the timeout).
func attachUntil(t *testing.T, c *crimux, ctrID, input, want string, timeout time.Duration) {
	t.Helper()
	streamUntil(t, timeout, input, want, filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint, "attach", "-i", ctrID)
}

// streamUntil runs a streaming client (crictl or kubectl attach), types
// input into its stdin every two seconds and reads its stdout until want
// shows (or the timeout).
func streamUntil(t *testing.T, timeout time.Duration, input, want, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	found := make(chan string, 1)
	go func() {
		var seen strings.Builder
		r := bufio.NewReader(stdout)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			seen.Write(buf[:n])
			if strings.Contains(seen.String(), want) || err != nil {
				found <- seen.String()
				return
			}
		}
	}()
	name := filepath.Base(bin) + " attach"
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case got := <-found:
			if !strings.Contains(got, want) {
				t.Fatalf("%s: %q never showed; the stream gave %q", name, want, got)
			}
			return
		case <-tick.C:
			_, _ = io.WriteString(stdin, input) // until the console answers
		case <-ctx.Done():
			t.Fatalf("%s: %q did not show within %v", name, want, timeout)
		}
	}
}

// portForward runs crictl port-forward podID <local>:<port> until the test
// ends and returns the local port once it accepts connections.
func portForward(t *testing.T, c *crimux, podID string, port int) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint,
		"port-forward", podID, fmt.Sprintf("%d:%d", local, port))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", local), time.Second)
		if err == nil {
			conn.Close()
			return local
		}
		if time.Now().After(deadline) {
			t.Fatalf("crictl port-forward never listened on %d: %v\n%s", local, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
