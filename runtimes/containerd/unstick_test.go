package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const strandedCtr = "52c0df61b4fd6d4648028079dd5d40a5e4c0c634ca0f66999e60b007a11fefd0"

// strandedErr is containerd's refusal as the chaos test saw it.
var strandedErr = status.Error(codes.FailedPrecondition, fmt.Sprintf(
	"failed to remove container %[1]q: failed to delete containerd container %[1]q: cannot delete running task %[1]s: failed precondition", strandedCtr))

// calls is an invoker answering with errs in turn (then nil), counting calls.
type calls struct {
	errs []error
	n    int
}

func (c *calls) invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	c.n++
	if c.n <= len(c.errs) {
		return c.errs[c.n-1]
	}
	return nil
}

func TestRemovalOfAStrandedContainerEndsItsTaskAndRetries(t *testing.T) {
	tasks := &fakeTasks{busy: 1}
	r := &taskReaper{tasks: tasks, containers: &fakeContainers{}}
	inv := &calls{errs: []error{strandedErr}}
	err := unstickRemovals(r, slog.Default())(context.Background(), "/runtime.v1.RuntimeService/RemovePodSandbox", nil, nil, nil, inv.invoke)
	if err != nil {
		t.Fatalf("RemovePodSandbox: %v, want it to succeed once the task is ended", err)
	}
	if inv.n != 2 || tasks.kills != 1 || tasks.deletes != 2 {
		t.Fatalf("calls %d, kills %d, task deletes %d; want the removal retried once after one kill and the delete retried until it went", inv.n, tasks.kills, tasks.deletes)
	}
	if len(tasks.namespaces) == 0 || tasks.namespaces[0] != criNamespace {
		t.Fatalf("task API called in namespaces %v, want %q", tasks.namespaces, criNamespace)
	}
}

func TestOtherFailuresPassThroughUntouched(t *testing.T) {
	for _, tc := range []struct {
		method string
		err    error
	}{
		{"/runtime.v1.RuntimeService/StopPodSandbox", strandedErr},                                                               // not a removal
		{"/runtime.v1.RuntimeService/RemoveContainer", status.Error(codes.NotFound, "gone")},                                     // another error
		{"/runtime.v1.RuntimeService/RemoveContainer", status.Error(codes.FailedPrecondition, "cannot delete running task abc")}, // not a container ID
	} {
		tasks := &fakeTasks{}
		r := &taskReaper{tasks: tasks, containers: &fakeContainers{}}
		inv := &calls{errs: []error{tc.err}}
		err := unstickRemovals(r, slog.Default())(context.Background(), tc.method, nil, nil, nil, inv.invoke)
		if !errors.Is(err, tc.err) || inv.n != 1 || tasks.kills+tasks.deletes != 0 {
			t.Errorf("%s with %v: got %v after %d calls, %d kills, %d deletes; want the error as is, no task call", tc.method, tc.err, err, inv.n, tasks.kills, tasks.deletes)
		}
	}
}

func TestAStrandedTaskThatCannotBeEndedKeepsTheOriginalError(t *testing.T) {
	tasks := &fakeTasks{busy: 1 << 30}
	r := &taskReaper{tasks: tasks, containers: &fakeContainers{}}
	inv := &calls{errs: []error{strandedErr}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // deleteTask gives up at once
	err := unstickRemovals(r, slog.Default())(ctx, "/runtime.v1.RuntimeService/RemoveContainer", nil, nil, nil, inv.invoke)
	if !strings.Contains(status.Convert(err).Message(), "cannot delete running task") || inv.n != 1 {
		t.Fatalf("got %v after %d calls, want containerd's refusal, not retried", err, inv.n)
	}
}
