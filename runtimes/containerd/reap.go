package containerd

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// criNamespace is the containerd namespace of containerd's CRI plugin.
const criNamespace = "k8s.io"

// reapWait bounds how long Reap waits for a killed task to stop.
const reapWait = 10 * time.Second

// taskReaper ends orphaned tasks through containerd's own task API, on the
// connection crimux's CRI calls to containerd take (cgroupgc.Reaper). It
// counts the calls that create or start a task, so a sweep can tell that
// none ran while it looked.
type taskReaper struct {
	tasks      tasksapi.TasksClient
	containers containersapi.ContainersClient
	begun      atomic.Uint64
	inFlight   atomic.Int64
}

// connect gives the reaper its clients (the connection is made after its
// counting interceptor).
func (r *taskReaper) connect(conn grpc.ClientConnInterface) {
	r.tasks, r.containers = tasksapi.NewTasksClient(conn), containersapi.NewContainersClient(conn)
}

// Calls implements cgroupgc.Reaper.
func (r *taskReaper) Calls() (uint64, bool) { return r.begun.Load(), r.inFlight.Load() > 0 }

// makesTasks tells whether a CRI method may create or start a task.
func makesTasks(method string) bool {
	for _, m := range []string{"/RunPodSandbox", "/CreateContainer", "/StartContainer"} {
		if strings.HasSuffix(method, m) {
			return true
		}
	}
	return false
}

// count is the interceptor that counts the calls making tasks.
func (r *taskReaper) count(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !makesTasks(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	r.inFlight.Add(1)
	r.begun.Add(1)
	defer r.inFlight.Add(-1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Reap implements cgroupgc.Reaper: SIGKILL to every process of id's task,
// then the task deleted (once it has stopped) and the container record.
func (r *taskReaper) Reap(ctx context.Context, id string) error {
	ctx = namespaces.WithNamespace(ctx, criNamespace)
	if err := r.endTask(ctx, id); err != nil {
		return err
	}
	_, err := r.containers.Delete(ctx, &containersapi.DeleteContainerRequest{ID: id})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	return nil
}

// endTask sends SIGKILL to every process of id's task and deletes the
// task once it has stopped; ctx carries the CRI namespace.
func (r *taskReaper) endTask(ctx context.Context, id string) error {
	// A task that has already exited refuses the kill; its delete decides.
	_, killErr := r.tasks.Kill(ctx, &tasksapi.KillRequest{ContainerID: id, Signal: uint32(unix.SIGKILL), All: true})
	if err := r.deleteTask(ctx, id); err != nil {
		if killErr != nil && status.Code(killErr) != codes.NotFound {
			return fmt.Errorf("kill task %s: %w (and %w)", id, killErr, err)
		}
		return err
	}
	return nil
}

// deleteTask deletes id's task, retrying while it is still stopping: the
// kill is asynchronous, and until the process has exited containerd
// answers "cannot delete a running process" (as code Unknown, from the
// shim), so every error but NotFound is retried until reapWait.
func (r *taskReaper) deleteTask(ctx context.Context, id string) error {
	deadline := time.Now().Add(reapWait)
	for {
		_, err := r.tasks.Delete(ctx, &tasksapi.DeleteTaskRequest{ContainerID: id})
		switch {
		case err == nil || status.Code(err) == codes.NotFound:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("delete task %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
