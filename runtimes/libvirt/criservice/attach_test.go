package criservice

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/vmtypes"
)

// TestAttach: the streaming URL of a running VM's console once the
// streaming server runs; refusals otherwise.
func TestAttach(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, e := newService(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	req := &runtimeapi.AttachRequest{ContainerId: "c1", Stdout: true}
	_, err := s.Attach(ctx, req)
	wantCode(t, "Attach before Serve", err, codes.Unavailable, "streaming server")
	if err := s.Serve(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil || !strings.HasPrefix(u.Host, "127.0.0.1:") || !strings.Contains(u.Path, "attach") {
		t.Fatalf("Attach URL %q, %v", resp.Url, err)
	}
	_, err = s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c2", Stdout: true})
	wantCode(t, "Attach to an exited VM", err, codes.FailedPrecondition, "not running")
	_, err = s.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "nope", Stdout: true})
	wantCode(t, "Attach to an unknown VM", err, codes.NotFound, "nope")
	if err := s.Serve(ctx, "256.0.0.1:0"); err == nil {
		t.Fatal("Serve on a bad address succeeded")
	}
}

// console is a fake qemu console socket: it records what it reads and
// writes out what it is given, then closes if told to.
type console struct {
	mu  sync.Mutex
	got bytes.Buffer
	lis net.Listener
}

func listenConsole(t *testing.T, path, out string, closeAfter bool) *console {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &console{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, out)
		if closeAfter {
			return
		}
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			c.mu.Lock()
			c.got.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *console) read() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.String()
}

type nopCloser struct {
	mu sync.Mutex
	bytes.Buffer
}

func (w *nopCloser) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Buffer.Write(p)
}

func (w *nopCloser) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Buffer.String()
}

func (*nopCloser) Close() error { return nil }

// TestConsoleStreams: the client's stdin reaches the console, the
// console reaches its stdout, until either ends or the client goes.
func TestConsoleStreams(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	streams := consoleStreams{s}
	t.Run("console output, then the console closes", func(t *testing.T) {
		c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
		listenConsole(t, filepath.Join(c.Dir, vmfiles.ConsoleSocketFile), "login: ", true) // a VM made before run/
		out := &nopCloser{}
		if err := streams.Attach(context.Background(), "c1", nil, out, nil, true, nil); err != nil {
			t.Fatal(err)
		}
		if out.String() != "login: " {
			t.Fatalf("stdout %q, want the console's output", out.String())
		}
	})
	t.Run("stdin reaches the console", func(t *testing.T) {
		cfg := podConfig(t, "web")
		sb := runPod(t, s, cfg)
		id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
		c := e.Record(t, id)
		con := listenConsole(t, vmfiles.ConsoleSocket(c.Dir), "", false)
		if err := streams.Attach(context.Background(), id, strings.NewReader("root\n"), nil, nil, true, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "stdin at the console", func() bool { return con.read() == "root\n" })
	})
	t.Run("the client goes", func(t *testing.T) {
		c := putVM(t, e, "sb3", "c3", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
		listenConsole(t, filepath.Join(c.Dir, vmfiles.ConsoleSocketFile), "", false)
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		defer pw.Close()
		errc := make(chan error, 1)
		go func() { errc <- streams.Attach(ctx, "c3", pr, &nopCloser{}, nil, true, nil) }()
		time.Sleep(10 * time.Millisecond)
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Attach did not end with its client")
		}
	})
	t.Run("no console", func(t *testing.T) {
		putVM(t, e, "sb4", "c4", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
		err := streams.Attach(context.Background(), "c4", nil, &nopCloser{}, nil, true, nil)
		if err == nil || !strings.Contains(err.Error(), "connect to the console of crimux-c4") {
			t.Fatalf("Attach without a console socket: %v", err)
		}
		err = streams.Attach(context.Background(), "nope", nil, &nopCloser{}, nil, true, nil)
		wantCode(t, "Attach to an unknown VM", err, codes.NotFound, "nope")
	})
}

// TestReopenContainerLog: after kubelet rotated the CRI log (renamed
// it), the console goes on in a new file.
func TestReopenContainerLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e := newService(t)
	_, id := runningVM(t, s, "web")
	c := e.Record(t, id)
	consoleLog := filepath.Join(c.Dir, vmfiles.ConsoleLogFile)
	appendFile(t, consoleLog, "before\r\n")
	waitFor(t, "the first line in the CRI log", func() bool { return fileHas(c.LogPath, "stdout F before\n") })
	if err := os.Rename(c.LogPath, c.LogPath+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	appendFile(t, consoleLog, "after\r\n")
	waitFor(t, "the next line in the new CRI log", func() bool { return fileHas(c.LogPath, "stdout F after\n") })
	if fileHas(c.LogPath, "before") || fileHas(c.LogPath+".1", "after") {
		t.Fatal("lines in the wrong file after the rotation")
	}
	_, err := s.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: "nope"})
	wantCode(t, "ReopenContainerLog(nope)", err, codes.NotFound, "nope")
	putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	if _, err := s.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: "c2"}); err != nil {
		t.Fatalf("ReopenContainerLog of a VM without copier: %v", err)
	}
}
