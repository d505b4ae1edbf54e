package podnet

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testbed"
)

// TestNetNSCreateLeavesNoThreadInside: making a pod's namespace leaves
// none of crimux's threads in it. A thread left there holds the namespace
// alive after its file is removed, and when it is the main thread (which
// the Go runtime parks instead of ending) the whole process shows in the
// pod's namespace (/proc/PID/ns/net): CI saw crimux's pid "in the
// namespace" of a removed VM pod. The goroutine that makes the namespace
// runs on whichever thread the scheduler gives it, the main one included,
// so the test makes many.
func TestNetNSCreateLeavesNoThreadInside(t *testing.T) {
	testbed.Require(t)
	if os.Getuid() != 0 {
		t.Fatal("test bed: needs root")
	}
	dir := t.TempDir()
	for i := 0; i < 300; i++ {
		path := filepath.Join(dir, fmt.Sprint("ns", i))
		if err := createNetNS(path); err != nil {
			t.Fatal(err)
		}
		ino := nsInode(t, path)
		if err := removeNetNS(path); err != nil {
			t.Fatal(err)
		}
		if tasks := tasksInNetNS(ino); len(tasks) > 0 {
			t.Fatalf("namespace %d of %s: threads %v of this process (pid %d) are still in it after it was removed", i, path, tasks, os.Getpid())
		}
	}
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// tasksInNetNS lists this process's threads in the namespace ino, waiting
// a little for threads the Go runtime is ending to go.
func tasksInNetNS(ino uint64) []string {
	want := fmt.Sprintf("net:[%d]", ino)
	var in []string
	for try := 0; try < 50; try++ {
		in = in[:0]
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if l, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net")); err == nil && l == want {
				in = append(in, task.Name())
			}
		}
		if len(in) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return in
}
