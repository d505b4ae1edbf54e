package containerd

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/runtimes/containerd/cgroupgc"
)

// sweepInterval is how often stray container cgroups are looked for.
const sweepInterval = time.Minute

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

// knownIDs are containerd's own container and sandbox IDs, asked through
// the sweep's own connection (no prefix added).
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
	known := map[string]bool{}
	for _, c := range ctrs.GetContainers() {
		known[c.GetId()] = true
	}
	for _, p := range pods.GetItems() {
		known[p.GetId()] = true
	}
	return known, nil
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

// countSweeps counts what each sweep removed (crimux_gc_removals_total).
func countSweeps(c Counters) func(cgroupgc.Report) {
	return func(rep cgroupgc.Report) {
		c.GCRemoved("container_cgroup", len(rep.Removed))
		c.GCRemoved("orphan_task", len(rep.Reaped))
	}
}
