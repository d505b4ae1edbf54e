package migproxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer stands for the target qemu: it echoes what it reads and,
// once it has read EOF, writes "bye", so a client that gets "bye" knows
// its half-close went all the way and the reply still came back.
type echoServer struct {
	ln       *net.UnixListener
	accepted atomic.Int32
	wg       sync.WaitGroup
}

const bye = "bye"

func startEcho(t *testing.T, path string) *echoServer {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return serveEcho(t, ln)
}

// serveEcho runs an echo server on ln, until the test ends.
func serveEcho(t *testing.T, ln *net.UnixListener) *echoServer {
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go e.serve()
	t.Cleanup(e.close)
	return e
}

func (e *echoServer) serve() {
	defer e.wg.Done()
	for {
		c, err := e.ln.AcceptUnix()
		if err != nil {
			return
		}
		e.accepted.Add(1)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer c.Close()
			if _, err := io.Copy(c, c); err == nil {
				io.WriteString(c, bye)
			}
		}()
	}
}

func (e *echoServer) close() {
	e.ln.Close()
	e.wg.Wait()
}

// shortDir is a temp dir with a short path: t.TempDir's can pass the 108
// bytes a unix socket path may have.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// logBuffer collects a logger's lines for tests to look in.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// rig is a target node: a Listener with an echo server per channel.
type rig struct {
	ca       *testCA
	listener *Listener
	sockets  map[string]string // channel -> target socket
	echo     map[string]*echoServer
	logs     *logBuffer
	base     string
}

func newRig(t *testing.T, headerWait time.Duration) *rig {
	t.Helper()
	r := &rig{ca: newCA(t, "cluster"), sockets: map[string]string{}, echo: map[string]*echoServer{},
		logs: &logBuffer{}, base: shortDir(t)}
	server, _ := node(t, r.ca)
	l, err := listen("127.0.0.1:0", server, r.logs.logger(), headerWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r.listener = l
	if err := os.Mkdir(filepath.Join(r.base, "tgt"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"mem", "disk"} {
		r.sockets[ch] = filepath.Join(r.base, "tgt", ch+".sock")
		r.echo[ch] = startEcho(t, r.sockets[ch])
	}
	return r
}

// accepted is how many connections reached the target sockets.
func (r *rig) accepted() int32 { return r.echo["mem"].accepted.Load() + r.echo["disk"].accepted.Load() }

// forward starts a source node's Forwarder for token, from a node of the
// rig's CA, its sockets in a directory Start makes.
func (r *rig) forward(t *testing.T, token string) (*Forwarder, map[string]string) {
	t.Helper()
	_, client := node(t, r.ca)
	return r.forwardWith(t, token, client)
}

func (r *rig) forwardWith(t *testing.T, token string, client *tls.Config) (*Forwarder, map[string]string) {
	t.Helper()
	dir := filepath.Join(r.base, "src")
	channels := map[string]string{"mem": filepath.Join(dir, "mem.sock"), "disk": filepath.Join(dir, "disk.sock")}
	fw, err := Start(Forward{Token: token, Target: r.listener.Addr(), Client: client,
		Channels: channels, UID: os.Getuid(), GID: os.Getgid(), Log: r.logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	return fw, channels
}

// exchange plays the source qemu: it sends payload on the unix socket at
// path, half-closes, and reads until EOF. A refused connection shows as
// a reply without "bye", and maybe a reset.
func exchange(t *testing.T, path string, payload []byte) ([]byte, error) {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	written := make(chan struct{})
	go func() {
		defer close(written)
		c.Write(payload)
		c.CloseWrite()
	}()
	reply, err := io.ReadAll(c)
	<-written
	return reply, err
}
