package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

// privateContainerd is a throwaway containerd of one test (its own root,
// state and socket), so the test can stop it without disturbing the bed.
type privateContainerd struct {
	t      *testing.T
	dir    string
	socket string
	cmd    *exec.Cmd
	logs   bytes.Buffer
}

func newPrivateContainerd(t *testing.T) *privateContainerd {
	dir, err := os.MkdirTemp("/run", "crimux-e2e-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &privateContainerd{t: t, dir: dir, socket: filepath.Join(dir, "containerd.sock")}
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
[plugins.'io.containerd.cri.v1.runtime'.cni]
  conf_dir = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), p.socket, p.socket+".ttrpc", filepath.Join(dir, "cni"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

func (p *privateContainerd) start() {
	p.t.Helper()
	p.cmd = exec.Command(filepath.Join(bed.testbed, "bin", "containerd"), "--config", filepath.Join(p.dir, "config.toml"))
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	testutil.Eventually(p.t, 20*time.Second, "private containerd socket", func() error {
		_, err := os.Stat(p.socket)
		return err
	})
}

func (p *privateContainerd) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait()
	p.cmd = nil
	if p.t.Failed() {
		p.t.Logf("containerd logs:\n%s", p.logs.String())
	}
}

// TestContainerdStopped: while containerd is down crimux answers with
// Unavailable naming the runtime, reports the node not ready with a
// reason, keeps serving, and recovers by itself when containerd returns.
func TestContainerdStopped(t *testing.T) {
	requireBed(t)
	ctrd := newPrivateContainerd(t)
	ctrd.start()
	c := startCrimux(t, "unix://"+ctrd.socket)
	rs, is := c.client()
	if _, err := rs.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{}); err != nil {
		t.Fatalf("ListPodSandbox with containerd up: %v", err)
	}

	ctrd.stop()
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "down", Namespace: "crimux-e2e", Uid: "down-uid"}}
	_, err := rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	wantCode(t, err, codes.Unavailable, `runtime "containerd"`)
	_, err = rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: "0123456789abcdef"})
	wantCode(t, err, codes.Unavailable, `runtime "containerd"`)
	_, err = is.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
	wantCode(t, err, codes.Unavailable, `runtime "containerd"`)
	// The last known (here: empty) list is served, not an error that would
	// make kubelet think every pod is gone.
	if _, err := rs.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{}); err != nil {
		t.Fatalf("ListPodSandbox with containerd down: %v", err)
	}
	st, err := rs.Status(ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status with containerd down: %v", err)
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if cond.Type == runtimeapi.RuntimeReady && (cond.Status || cond.Reason == "") {
			t.Fatalf("RuntimeReady with containerd down: %+v", cond)
		}
	}
	if _, err := rs.Version(ctx(t), &runtimeapi.VersionRequest{}); err != nil || !c.alive() {
		t.Fatalf("crimux stopped serving while containerd was down: %v", err)
	}

	ctrd.start()
	testutil.Eventually(t, 15*time.Second, "crimux reconnects to containerd", func() error {
		_, err := rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: "0123456789abcdef"})
		if code := statusCode(err); code != codes.NotFound {
			return fmt.Errorf("ContainerStatus: %v", err)
		}
		return nil
	})
}
