package crifake

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// SocketPath returns a path for a unix socket named name in a directory
// removed when the test ends: t.TempDir(), or a shorter temporary directory
// when t.TempDir() is too deep for a socket path.
func SocketPath(t testing.TB, name string) string {
	t.Helper()
	if p := filepath.Join(t.TempDir(), name); len(p) <= maxSocketPath {
		return p
	}
	dir, err := os.MkdirTemp("", "crifake")
	if err != nil {
		t.Fatalf("socket dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

// Server is a fake served on a unix socket.
type Server struct {
	// Path is the socket's path.
	Path string

	g    *grpc.Server
	once sync.Once
	done chan struct{}
}

// Serve serves f on a unix socket at path (a stale socket file is
// replaced) until Stop or the end of the test.
func Serve(t testing.TB, f *Fake, path string) *Server {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove stale socket: %v", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(f.unaryInterceptor), grpc.StreamInterceptor(f.streamInterceptor))
	runtimeapi.RegisterRuntimeServiceServer(g, f)
	runtimeapi.RegisterImageServiceServer(g, f)
	s := &Server{Path: path, g: g, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = g.Serve(lis) // returns when stopped
	}()
	t.Cleanup(s.Stop)
	return s
}

// Endpoint returns the server's address as crimux configures runtimes,
// "unix:///path".
func (s *Server) Endpoint() string { return "unix://" + s.Path }

// Stop closes the listener (removing the socket) and every connection
// at once, the way a runtime that crashes would. Safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.g.Stop()
		<-s.done
	})
}
