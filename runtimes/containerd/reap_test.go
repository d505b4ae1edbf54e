package containerd

import (
	"context"
	"testing"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeTasks answers Delete as containerd does while a killed task is
// still exiting, busy times, then deletes it.
type fakeTasks struct {
	tasksapi.TasksClient
	busy           int
	kills, deletes int
	namespaces     []string
}

func (f *fakeTasks) note(ctx context.Context) {
	md, _ := metadata.FromOutgoingContext(ctx)
	f.namespaces = append(f.namespaces, md.Get("containerd-namespace")...)
}

func (f *fakeTasks) Kill(ctx context.Context, req *tasksapi.KillRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	f.note(ctx)
	f.kills++
	if req.Signal != 9 || !req.All {
		return nil, status.Errorf(codes.InvalidArgument, "kill %+v, want SIGKILL to all", req)
	}
	return &emptypb.Empty{}, nil
}

func (f *fakeTasks) Delete(ctx context.Context, _ *tasksapi.DeleteTaskRequest, _ ...grpc.CallOption) (*tasksapi.DeleteResponse, error) {
	f.note(ctx)
	f.deletes++
	if f.deletes <= f.busy {
		return nil, status.Error(codes.Unknown, "cannot delete a running process")
	}
	return &tasksapi.DeleteResponse{}, nil
}

type fakeContainers struct {
	containersapi.ContainersClient
	deleted []string
}

func (f *fakeContainers) Delete(_ context.Context, req *containersapi.DeleteContainerRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	f.deleted = append(f.deleted, req.ID)
	return nil, status.Error(codes.NotFound, "container not found") // containerd already dropped it
}

func TestReapRetriesDeleteUntilTheKilledTaskHasExited(t *testing.T) {
	tasks, ctrs := &fakeTasks{busy: 2}, &fakeContainers{}
	r := &taskReaper{tasks: tasks, containers: ctrs}
	if err := r.Reap(context.Background(), "abc"); err != nil {
		t.Fatalf("reap: %v", err)
	}
	if tasks.kills != 1 || tasks.deletes != 3 || len(ctrs.deleted) != 1 {
		t.Fatalf("kills %d, deletes %d, container deletes %v; want 1, 3 (two refused while running), [abc]",
			tasks.kills, tasks.deletes, ctrs.deleted)
	}
	for _, ns := range tasks.namespaces {
		if ns != criNamespace {
			t.Fatalf("a call went to namespace %q, want %q", ns, criNamespace)
		}
	}
	if len(tasks.namespaces) != 4 {
		t.Fatalf("namespace header on %d of 4 calls", len(tasks.namespaces))
	}
}

func TestReaperCountsTaskMakingCalls(t *testing.T) {
	r := &taskReaper{}
	invoke := func(method string) {
		_ = r.count(context.Background(), method, nil, nil, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				if _, inFlight := r.Calls(); inFlight != makesTasks(method) {
					t.Errorf("%s: in flight %v during the call", method, inFlight)
				}
				return nil
			})
	}
	for _, m := range []string{"/runtime.v1.RuntimeService/ListContainers", "/runtime.v1.RuntimeService/ContainerStatus"} {
		invoke(m)
	}
	if begun, inFlight := r.Calls(); begun != 0 || inFlight {
		t.Fatalf("after reads: begun %d, in flight %v", begun, inFlight)
	}
	for _, m := range []string{"/runtime.v1.RuntimeService/RunPodSandbox", "/runtime.v1.RuntimeService/CreateContainer", "/runtime.v1.RuntimeService/StartContainer"} {
		invoke(m)
	}
	if begun, inFlight := r.Calls(); begun != 3 || inFlight {
		t.Fatalf("after three task-making calls: begun %d, in flight %v", begun, inFlight)
	}
}
