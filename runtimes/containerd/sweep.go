package containerd

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/metrics"
	"github.com/crimux/crimux/runtimes/containerd/cgroupgc"
)

// sweepInterval is how often stray container cgroups are looked for.
const sweepInterval = time.Minute

// newSweeper keeps its records under <stateDir>/containerd-cgroups; known
// asks containerd which containers it knows.
func newSweeper(stateDir string, known func(context.Context) (map[string]bool, error), log *slog.Logger) (*cgroupgc.Sweeper, error) {
	return cgroupgc.New(filepath.Join(stateDir, "containerd-cgroups"), hierarchyRoots, cgroup.ParentPath, known, log)
}

func hierarchyRoots() ([]string, error) {
	l, err := cgroup.Discover()
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, h := range l.Hierarchies {
		roots = append(roots, h.Mount)
	}
	return roots, nil
}

// knownIDs are containerd's container and sandbox IDs (a non-primary
// entry's "<name>--" prefix taken off).
func knownIDs(ctx context.Context, client runtimeapi.RuntimeServiceClient) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctrs, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	pods, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, c := range ctrs.GetContainers() {
		ids[rawID(c.GetId())] = true
	}
	for _, p := range pods.GetItems() {
		ids[rawID(p.GetId())] = true
	}
	return ids, nil
}

func rawID(id string) string {
	if i := strings.LastIndex(id, "--"); i >= 0 {
		return id[i+2:]
	}
	return id
}

// recordParents notes a new pod's cgroup parent before containerd makes
// anything under it.
func recordParents(s *cgroupgc.Sweeper, log *slog.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*runtimeapi.RunPodSandboxRequest); ok {
			if err := s.Record(r.GetConfig().GetLinux().GetCgroupParent()); err != nil {
				log.Warn("cgroup parent not recorded for GC", "err", err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// countSweeps adds what a sweep removed to crimux_gc_removals_total.
func countSweeps(rep cgroupgc.Report) {
	metrics.GCRemovals.WithLabelValues("container_cgroup").Add(float64(len(rep.Removed)))
	metrics.GCRemovals.WithLabelValues("orphan_task").Add(float64(len(rep.Reaped)))
}
