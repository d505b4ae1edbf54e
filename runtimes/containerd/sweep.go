package containerd

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/internal/idcodec"
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

// knownIDs are containerd's own container and sandbox IDs: client's
// answers carry the IDs clients see (a non-primary entry's prefix added by
// ids), and ids takes it off again.
func knownIDs(ctx context.Context, client runtimeapi.RuntimeServiceClient, ids idcodec.Codec) (map[string]bool, error) {
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
		known[ids.Decode(c.GetId())] = true
	}
	for _, p := range pods.GetItems() {
		known[ids.Decode(p.GetId())] = true
	}
	return known, nil
}

// ownIDs is the codec that takes the IDs of this backend's answers back
// to containerd's own: the entry's codec, or for the primary (no codec)
// the zero one, which changes nothing.
func ownIDs(codec *idcodec.Codec) idcodec.Codec {
	if codec == nil {
		return idcodec.Codec{}
	}
	return *codec
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
