package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

const (
	busyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	nginxImage   = "registry.k8s.io/e2e-test-images/nginx:1.14-2"
	pullImage    = "registry.k8s.io/e2e-test-images/httpd:2.4.39-4"
)

func podJSON(t *testing.T, name string, extra string) string {
	logDir := t.TempDir()
	return writeJSON(t, "pod.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "crimux-e2e", "uid": %q, "attempt": 0},
  "log_directory": %q,
  "linux": {}%s
}`, name, podUID(name), logDir, extra))
}

func containerJSON(t *testing.T, name, image string, cmd []string) string {
	c, _ := json.Marshal(cmd)
	return writeJSON(t, "ctr.json", fmt.Sprintf(`{
  "metadata": {"name": %q},
  "image": {"image": %q},
  "command": %s,
  "log_path": "%s.log",
  "linux": {}
}`, name, image, c, name))
}

// TestContainerLifecycleThroughCrimux drives a busybox pod through crimux
// with crictl, from pull to rmp, checking what each step should show.
func TestContainerLifecycleThroughCrimux(t *testing.T) {
	parallel(t)
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	c.crictl("pull", busyboxImage)
	pod := podJSON(t, "lifecycle", "")
	ctr := containerJSON(t, "sleeper", busyboxImage, []string{"sh", "-c", "echo hello-from-crimux; exec sleep 3600"})

	podID := c.crictl("runp", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, ctr, pod)
	c.crictl("start", ctrID)

	t.Run("ps and pods list them running", func(t *testing.T) {
		if out := c.crictl("ps", "-q", "--state", "running"); !strings.Contains(out, ctrID) {
			t.Fatalf("crictl ps does not list %s:\n%s", ctrID, out)
		}
		if out := c.crictl("pods", "-q", "--state", "ready"); !strings.Contains(out, podID) {
			t.Fatalf("crictl pods does not list %s:\n%s", podID, out)
		}
	})
	t.Run("inspect and inspectp", func(t *testing.T) {
		var st struct {
			Status struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"status"`
		}
		mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &st)
		if st.Status.ID != ctrID || st.Status.State != "CONTAINER_RUNNING" {
			t.Fatalf("inspect: id %q state %q, want %q CONTAINER_RUNNING", st.Status.ID, st.Status.State, ctrID)
		}
		mustJSON(t, c.crictl("inspectp", "-o", "json", podID), &st)
		if st.Status.ID != podID || st.Status.State != "SANDBOX_READY" {
			t.Fatalf("inspectp: id %q state %q, want %q SANDBOX_READY", st.Status.ID, st.Status.State, podID)
		}
	})
	t.Run("logs", func(t *testing.T) {
		testutil.Eventually(t, within(t, 10*time.Second), "log line", func() error {
			if out, _ := c.crictlErr("logs", ctrID); !strings.Contains(out, "hello-from-crimux") {
				return fmt.Errorf("logs: %q", out)
			}
			return nil
		})
	})
	t.Run("exec", func(t *testing.T) {
		if out := c.crictl("exec", ctrID, "sh", "-c", "echo exec-$((6*7))"); out != "exec-42" {
			t.Fatalf("exec printed %q, want exec-42", out)
		}
		// The pod shares one PID namespace (CRI's default), so look for the
		// container's sleep among all processes, not at pid 1 (the pause).
		if out := c.crictl("exec", "--sync", ctrID, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"); !strings.Contains(out, "sleep 3600") {
			t.Fatalf("exec --sync: the container's processes are %q, want sleep 3600 among them", out)
		}
	})
	t.Run("stats", func(t *testing.T) {
		if st := c.stat(t, ctrID); st.ID != ctrID || st.WorkingSetBytes == 0 {
			t.Fatalf("stats: want %s's with a working set, got %+v", ctrID, st)
		}
	})
	t.Run("stop rm rmp", func(t *testing.T) {
		c.crictl("stop", ctrID)
		if out := c.crictl("ps", "-a", "-q", "--state", "exited"); !strings.Contains(out, ctrID) {
			t.Fatalf("stopped container not listed as exited:\n%s", out)
		}
		c.crictl("rm", ctrID)
		c.crictl("stopp", podID)
		c.crictl("rmp", podID)
		if out := c.crictl("ps", "-a", "-q"); strings.Contains(out, ctrID) {
			t.Fatalf("removed container still listed:\n%s", out)
		}
		if out := c.crictl("pods", "-q"); strings.Contains(out, podID) {
			t.Fatalf("removed pod still listed:\n%s", out)
		}
		// Idempotent, as kubelet and critest expect (through the CRI API:
		// crictl itself looks the ID up first and gives up).
		rs, _ := c.client()
		if _, err := rs.RemoveContainer(ctx(t), &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
			t.Fatalf("second RemoveContainer: %v", err)
		}
		if _, err := rs.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
			t.Fatalf("second RemovePodSandbox: %v", err)
		}
	})
}

// TestPortForwardThroughCrimux checks that the streaming URL containerd
// returns works when asked through crimux.
func TestPortForwardThroughCrimux(t *testing.T) {
	parallel(t)
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	c.crictl("pull", nginxImage)
	pod := podJSON(t, "portfwd", "")
	podID := c.crictl("runp", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, containerJSON(t, "web", nginxImage, nil), pod)
	c.crictl("start", ctrID)

	// A forward reaching the pod before nginx listens ends crictl's
	// session ("connection refused" inside the pod's netns, as kubectl
	// port-forward does): crictl is started again when it has exited.
	port := freePort(t)
	var exited chan struct{}
	forward := func() error {
		pf := exec.Command(filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint,
			"port-forward", podID, fmt.Sprintf("%d:80", port))
		if err := pf.Start(); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { _ = pf.Wait(); close(done) }()
		t.Cleanup(func() { _ = pf.Process.Kill(); <-done })
		exited = done
		return nil
	}
	if err := forward(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within(t, 20*time.Second), "HTTP through port-forward", func() error {
		select {
		case <-exited:
			if err := forward(); err != nil {
				return err
			}
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		return nil
	})
}

// TestImagesThroughCrimux: pull, images, inspecti, rmi, imagefsinfo, info.
func TestImagesThroughCrimux(t *testing.T) {
	parallel(t)
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	ref := c.crictl("pull", pullImage)
	if !strings.Contains(ref, "sha256:") {
		t.Fatalf("pull printed %q, want an image ref", ref)
	}
	if out := c.crictl("images"); !strings.Contains(out, "e2e-test-images/httpd") {
		t.Fatalf("images does not list the pulled image:\n%s", out)
	}
	c.crictl("inspecti", pullImage)
	c.crictl("rmi", pullImage)
	if out := c.crictl("images", "-q"); strings.Contains(out, strings.TrimPrefix(ref, "Image is up to date for ")) {
		t.Fatalf("image still listed after rmi:\n%s", out)
	}
	if _, err := c.crictlErr("inspecti", pullImage); err == nil {
		t.Fatalf("inspecti of a removed image succeeded")
	}
	var fs struct {
		Status struct {
			ImageFilesystems []struct{ UsedBytes struct{ Value string } } `json:"imageFilesystems"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("imagefsinfo", "-o", "json"), &fs)
	if len(fs.Status.ImageFilesystems) == 0 {
		t.Fatal("imagefsinfo reports no image filesystem")
	}
	var info struct {
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status bool   `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("info", "-o", "json"), &info)
	ready := map[string]bool{}
	for _, cond := range info.Status.Conditions {
		ready[cond.Type] = cond.Status
	}
	if !ready["RuntimeReady"] || !ready["NetworkReady"] {
		t.Fatalf("info: conditions %v, want RuntimeReady and NetworkReady true", ready)
	}
	if out := c.crictl("version"); !strings.Contains(out, "RuntimeName:  crimux") {
		t.Fatalf("version does not name crimux:\n%s", out)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("parse JSON: %v\n%s", err, s)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
