package criservice

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestExecStream: crictl exec / kubectl exec on a VM: the command runs
// through the guest agent with the client's stdin as its input, its
// output reaches the client and its exit code is the stream's; a TTY is
// refused pointing at attach and SSH.
func TestExecStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, e := newService(t)
	c := putVM(t, e, "sb", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	var mu sync.Mutex
	var started string
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		d.Agent = func(cmd string) (string, error) {
			if strings.Contains(cmd, `"guest-exec"`) {
				mu.Lock()
				started = cmd
				mu.Unlock()
			}
			return execAgent(cmd)
		}
	})

	_, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true})
	wantCode(t, "Exec with a TTY", err, codes.FailedPrecondition, "crictl attach")
	_, err = s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Stdout: true})
	wantCode(t, "Exec before the streaming server", err, codes.Unavailable, "streaming server")
	if err := s.startStreaming(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Stdout: true})
	if err != nil || !strings.Contains(resp.GetUrl(), "/exec/") {
		t.Fatalf("Exec = %v, %v; want a streaming URL", resp, err)
	}
	putVM(t, e, "sb2", "off", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerShutdown)
	_, err = s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "off", Cmd: []string{"sh"}, Stdout: true})
	wantCode(t, "Exec in a VM powered off by its user", err, codes.FailedPrecondition, "Shutdown")

	out, errOut := &nopCloser{}, &nopCloser{}
	err = consoleStreams{s}.Exec(ctx, "c1", []string{"sh", "-c", "cat; exit 3"}, strings.NewReader("hello"), out, errOut, false, nil)
	var exit utilexec.CodeExitError
	if !errors.As(err, &exit) || exit.Code != 3 {
		t.Fatalf("stream Exec: %v, want the exit code 3", err)
	}
	if out.String() != "ran\n" {
		t.Fatalf("stdout %q, want the command's output", out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(started, base64.StdEncoding.EncodeToString([]byte("hello"))) {
		t.Fatalf("guest-exec %s: stdin did not reach the command", started)
	}
}

// TestPortForward: a forwarded connection reaches the pod IP's port and
// carries bytes both ways; bad ports and pods without a network are
// refused naming why.
func TestPortForward(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, e := newService(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := int32(lis.Addr().(*net.TCPAddr).Port)
	e.PutPod(t, "sb", func(sb *store.Sandbox) {
		sb.Net = &podnet.Attachment{Ready: true}
		sb.Net.IP = "127.0.0.1" // the "guest"
	})
	e.PutPod(t, "nonet", func(sb *store.Sandbox) { sb.Net = nil })

	_, err = s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "sb", Port: []int32{70000}})
	wantCode(t, "PortForward to port 70000", err, codes.InvalidArgument, "port[0]")
	_, err = s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nonet", Port: []int32{22}})
	wantCode(t, "PortForward to a pod without a network", err, codes.FailedPrecondition, "no pod network")

	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- consoleStreams{s}.PortForward(ctx, "sb", port, server) }()
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v: want the echo", buf, err)
	}
	client.Close()
	if err := <-done; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("PortForward ended with %v", err)
	}
}
