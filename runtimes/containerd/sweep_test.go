package containerd

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/runtimes/containerd/cgroupgc"
)

// TestKnownIDsAreContainerdsOwn: the sweep compares cgroup names with
// containerd's own IDs, asked through a connection of its own (no entry's
// prefix on them).
func TestKnownIDsAreContainerdsOwn(t *testing.T) {
	f := crifake.New("ctrd")
	f.AddSandboxes(&runtimeapi.PodSandbox{Id: "p1"})
	f.AddContainers(&runtimeapi.Container{Id: "c1", PodSandboxId: "p1"})
	srv := crifake.Serve(t, f, crifake.SocketPath(t, "containerd.sock"))
	kata := idcodec.New("kata")
	b, err := Dial(srv.Endpoint(), Options{CallTimeout: 10 * time.Second, Codec: &kata, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sw := sweepOf(t, b)
	known, err := knownIDs(context.Background(), runtimeapi.NewRuntimeServiceClient(sw.conn))
	if err != nil || len(known) != 2 || !known["p1"] || !known["c1"] {
		t.Errorf("knownIDs = %v, %v; want p1 and c1", known, err)
	}
}

// TestCountSweeps: a sweep's removals are counted by kind.
func TestCountSweeps(t *testing.T) {
	c := &recordingCounters{removed: map[string]int{}}
	countSweeps(c)(cgroupgc.Report{Removed: []string{"a", "b", "c"}, Reaped: []string{"t1", "t2"}})
	if c.removed["container_cgroup"] != 3 || c.removed["orphan_task"] != 2 {
		t.Errorf("counted %v, want container_cgroup 3, orphan_task 2", c.removed)
	}
}

type recordingCounters struct{ removed map[string]int }

func (c *recordingCounters) GCRemoved(kind string, n int) { c.removed[kind] += n }
func (c *recordingCounters) Reconnected(string)           {}
