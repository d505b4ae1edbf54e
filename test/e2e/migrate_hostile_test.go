package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crimux/crimux/internal/testutil"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// node2MigrationDir is node two's migration socket root as the host sees
// it: test/bed/node2-up.sh binds $N2_RUN/root/run/crimux over node two's
// /run/crimux.
const node2MigrationDir = "/run/crimux-testbed/node2/root/run/crimux/migration"

// TestVMMigrateHostileListener: the target qemu owns its migration
// socket directory, so a compromised one can put another process's
// socket where its memory stream's socket is. Here, as soon as the target
// qemu listens on mem.sock, a socket root listens on is renamed over it
// (what a hard link to a daemon's socket amounts to). Node two's crimux
// must write nothing to it: the listener gets no byte, the migration
// fails, the VM runs on on node one as it was, and node two keeps
// nothing of it.
func TestVMMigrateHostileListener(t *testing.T) {
	g := newMigrationRig(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dst := &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: g.ctr2}}
	src, err := g.n1.vmClient().GetMigrationSource(ctx, &vmv1.GetMigrationSourceRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: g.ctr1}}})
	if err != nil {
		t.Fatalf("GetMigrationSource on node one: %v", err)
	}
	prep, err := g.n2.vmClient().PrepareMigration(ctx, &vmv1.PrepareMigrationRequest{Vm: dst, Source: src.GetSource()})
	if err != nil {
		t.Fatalf("PrepareMigration on node two: %v", err)
	}
	dir := filepath.Join(node2MigrationDir, prep.GetTarget().GetToken())
	h := listenHostile(t, filepath.Join(dir, "hostile.sock"))
	swapped := make(chan error, 1)
	go func() { swapped <- h.replaceWhenListening(ctx, filepath.Join(dir, "mem.sock")) }()

	migErr := migrateOnce(ctx, g.n1.vmClient(), &vmv1.MigrateRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: g.ctr1}}, Target: prep.GetTarget()})
	t.Logf("Migrate with a hostile mem.sock: %v", migErr)
	if err := <-swapped; err != nil {
		t.Fatalf("the hostile socket never replaced the target qemu's mem.sock: %v", err)
	}
	if migErr == nil {
		t.Fatal("the migration succeeded with another process's socket as the target's mem.sock")
	}
	fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
	defer fcancel()
	// As crimuxctl does; the target may have ended its side already.
	if _, err := g.n2.vmClient().FinishMigration(fctx, &vmv1.FinishMigrationRequest{Vm: dst, Failed: "the source failed to send it"}); err != nil && status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("FinishMigration (failed) on node two: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "the target exits MigrationFailed", func() error {
		if r := containerStateReason(t, g.n2, g.ctr2); r != "CONTAINER_EXITED MigrationFailed" {
			return fmt.Errorf("the target's container is %q", r)
		}
		return nil
	})
	if n := h.received(); n != 0 {
		t.Fatalf("the hostile listener behind mem.sock received %d bytes of the source's stream", n)
	}
	if !strings.Contains(g.n2.logs.String(), "is not the target qemu's") {
		t.Errorf("node two's crimux does not log the foreign socket it refused:\n%s", tail(g.n2.logs.String(), 30))
	}
	g.requireStillOnSource(t)
	g.requireNothingOnNode2(t)
}

// migrateOnce runs Migrate to its end: nil if it succeeded.
func migrateOnce(ctx context.Context, c vmv1.VMServiceClient, req *vmv1.MigrateRequest) error {
	stream, err := c.Migrate(ctx, req)
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// hostileListener is a unix socket root listens on, counting every byte
// anyone writes to it.
type hostileListener struct {
	path  string
	bytes atomic.Int64
}

func listenHostile(t *testing.T, path string) *hostileListener {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("the hostile listener: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	h := &hostileListener{path: path}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				h.bytes.Add(n)
			}()
		}
	}()
	return h
}

// replaceWhenListening renames the hostile socket over target as soon as
// target exists (the target qemu listening there).
func (h *hostileListener) replaceWhenListening(ctx context.Context, target string) error {
	for {
		if fi, err := os.Lstat(target); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return os.Rename(h.path, target)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// received is how many bytes the listener has read; it waits a moment
// for connections still being read.
func (h *hostileListener) received() int64 {
	time.Sleep(500 * time.Millisecond)
	return h.bytes.Load()
}
