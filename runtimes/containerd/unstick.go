package containerd

import (
	"context"
	"log/slog"
	"regexp"
	"strings"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// strandedTask finds the container named in containerd's refusal to
// remove a container whose task still exists ("cannot delete running task
// <id>"), which its CRI plugin says has exited.
var strandedTask = regexp.MustCompile(`cannot delete running task ([0-9a-f]{64})\b`)

// strandedID returns the container ID in err when err is that refusal.
func strandedID(err error) (string, bool) {
	if status.Code(err) != codes.FailedPrecondition {
		return "", false
	}
	m := strandedTask.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return "", false
	}
	return m[1], true
}

// unstickRemovals is the interceptor that lets RemoveContainer and
// RemovePodSandbox through a container containerd's CRI plugin holds as
// CONTAINER_EXITED while its task still exists. The chaos test met that
// state (once in three runs); the likely cause, not proven: a
// StartContainer cut short by a crimux SIGKILL (its context cancelled)
// after the shim started the task, which containerd marks exited while its
// deferred task delete fails. From then on every removal is refused, so StopPodSandbox
// and StopContainer are no-ops (the container "has exited") and the pod
// can never be removed (seen in the chaos test: 3 minutes of refusals).
// The task of a container its runtime calls exited, being removed, is
// ended here through containerd's task API, and the removal tried once
// more. It sits next to the wire, after any ID codec, so the IDs in
// containerd's errors are containerd's.
func unstickRemovals(r *taskReaper, log *slog.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !isRemoval(method) {
			return err
		}
		id, ok := strandedID(err)
		if !ok {
			return err
		}
		log.Warn("ending the task of a container containerd says has exited, to remove it", "container", id, "rpc", method)
		if endErr := r.endTask(namespaces.WithNamespace(ctx, criNamespace), id); endErr != nil {
			log.Warn("could not end the stranded task", "container", id, "err", endErr)
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// isRemoval tells whether method removes a container or a pod.
func isRemoval(method string) bool {
	return strings.HasSuffix(method, "/RemoveContainer") || strings.HasSuffix(method, "/RemovePodSandbox")
}
