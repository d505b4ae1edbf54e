package containerd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/runtimes/containerd/cgroupgc"
)

// One sweep of stray container cgroups runs per containerd, whatever the
// number of backends in front of it: two entries of the config on one
// endpoint (with different prefixes), or a reload whose new backend
// overlaps the old one until the old one's calls drain. Its records live
// in a directory of that containerd's own, so a sweep never judges the
// pods of another containerd by its own list; its reaper counts the
// task-making calls of every backend in front of that containerd, so it
// never ends a task one of them is making; and it asks containerd through
// a connection of its own, which outlives any one backend.
var sweeps = struct {
	sync.Mutex
	byDir map[string]*sweep
}{byDir: map[string]*sweep{}}

// sweep is the shared sweep of one containerd.
type sweep struct {
	dir     string
	sweeper *cgroupgc.Sweeper
	reaper  *taskReaper
	conn    *grpc.ClientConn
	stop    context.CancelFunc
	refs    int
}

// sweepRoots finds the cgroup hierarchies' roots the sweeps look in
// (tests point it at a tree of their own).
var sweepRoots = hierarchyRoots

// recordsDir is where the sweep of the containerd at endpoint keeps its
// records: <stateDir>/containerd-cgroups/<hash of the endpoint>.
func recordsDir(stateDir, endpoint string) string {
	sum := sha256.Sum256([]byte(endpoint))
	return filepath.Join(stateDir, "containerd-cgroups", hex.EncodeToString(sum[:8]))
}

// acquireSweep returns the sweep of the containerd at socket path,
// starting it on first use; release gives it back, and the last release
// stops it.
func acquireSweep(stateDir, endpoint, path string, counters Counters, log *slog.Logger) (_ *sweep, release func(), _ error) {
	dir := recordsDir(stateDir, endpoint)
	sweeps.Lock()
	defer sweeps.Unlock()
	sw, ok := sweeps.byDir[dir]
	if !ok {
		var err error
		if sw, err = startSweep(dir, path, counters, log); err != nil {
			return nil, nil, err
		}
		sweeps.byDir[dir] = sw
	}
	sw.refs++
	var once sync.Once
	return sw, func() { once.Do(func() { releaseSweep(sw) }) }, nil
}

func releaseSweep(sw *sweep) {
	sweeps.Lock()
	defer sweeps.Unlock()
	if sw.refs--; sw.refs > 0 {
		return
	}
	delete(sweeps.byDir, sw.dir)
	sw.stop()
	sw.conn.Close()
}

// startSweep opens the sweep's connection and runs it every sweepInterval.
func startSweep(dir, path string, counters Counters, log *slog.Logger) (*sweep, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("sweep connection to %s: %w", path, err)
	}
	client := runtimeapi.NewRuntimeServiceClient(conn)
	known := func(ctx context.Context) (map[string]bool, error) { return knownIDs(ctx, client) }
	sweeper, err := cgroupgc.New(dir, sweepRoots, cgroup.ParentPath, known, log.With("component", "cgroupgc", "records", dir))
	if err != nil {
		conn.Close()
		return nil, err
	}
	reaper := &taskReaper{}
	reaper.connect(conn)
	sweeper.SetReaper(reaper)
	ctx, cancel := context.WithCancel(context.Background())
	go sweeper.Run(ctx, sweepInterval, countSweeps(counters))
	return &sweep{dir: dir, sweeper: sweeper, reaper: reaper, conn: conn, stop: cancel}, nil
}
