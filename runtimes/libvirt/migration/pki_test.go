package migration

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil/pkitest"
)

// writePKI writes a node's pkipath for one test (pkitest.NodeDir):
// every node of a test may share it (one cluster CA).
func writePKI(t *testing.T) string { return pkitest.NodeDir(t) }

// shortDir is a temporary directory of a short path: a migration's
// socket paths (<dir>/<32 hex>/mem.sock) must fit the 108 bytes of a
// unix socket address, which t.TempDir's may pass.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mig")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startNode starts a node on 127.0.0.1 with pki, sockets in a directory
// of its own, closed at the end of the test; edit may change its config
// first.
func startNode(t *testing.T, pki string, edit func(*Config)) *Node {
	t.Helper()
	cfg := Config{Address: "127.0.0.1:0", LibvirtURI: "qemu+tls://127.0.0.1/system", PKIDir: pki,
		CompletionTimeoutPerGiB: time.Minute, SocketDir: filepath.Join(shortDir(t), "s")}
	if edit != nil {
		edit(&cfg)
	}
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}
