package errdefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestCode(t *testing.T) {
	downstream := status.Error(codes.NotFound, "container c1 not found")
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"invalid argument", fmt.Errorf("pod_sandbox_id %q: %w", "x", ErrInvalidArgument), codes.InvalidArgument},
		{"a full disk", fmt.Errorf("write %s: %w", "/var/lib/crimux/vm.db", &os.PathError{Op: "write", Path: "vm.db", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{"a quota", fmt.Errorf("create: %w", syscall.EDQUOT), codes.ResourceExhausted},
		{"not found wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", ErrNotFound)), codes.NotFound},
		{"already exists", fmt.Errorf("x: %w", ErrAlreadyExists), codes.AlreadyExists},
		{"failed precondition", fmt.Errorf("x: %w", ErrFailedPrecondition), codes.FailedPrecondition},
		{"unavailable", fmt.Errorf("x: %w", ErrUnavailable), codes.Unavailable},
		{"unimplemented", fmt.Errorf("x: %w", ErrUnimplemented), codes.Unimplemented},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{"sentinel in a join", errors.Join(errors.New("a"), fmt.Errorf("b: %w", ErrNotFound)), codes.NotFound},
		{"bare downstream status", downstream, codes.NotFound},
		{"wrapped downstream status", fmt.Errorf("runtime %q: %w", "vm", downstream), codes.NotFound},
		{"downstream status wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", status.Error(codes.ResourceExhausted, "full"))), codes.ResourceExhausted},
		{"sentinel wins over a status", fmt.Errorf("%w: %w", ErrInvalidArgument, status.Error(codes.Internal, "x")), codes.InvalidArgument},
		{"plain error", errors.New("boom"), codes.Unknown},
		{"Invalid helper", Invalid("config", "must be set"), codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.err); got != tt.want {
				t.Errorf("Code(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestToGRPC(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "connection error: dial unix /run/vm.sock: connect: no such file or directory")
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
		wantMsg  string
	}{
		{
			name:     "wrapped sentinel keeps the whole message",
			err:      fmt.Errorf("container_id %q: %w", "c1", ErrNotFound),
			wantCode: codes.NotFound,
			wantMsg:  `container_id "c1": not found`,
		},
		{
			name:     "Invalid names the field",
			err:      Invalid("pod_sandbox_id", "must not be empty"),
			wantCode: codes.InvalidArgument,
			wantMsg:  "pod_sandbox_id: must not be empty: invalid argument",
		},
		{
			name:     "bare downstream status passes through",
			err:      status.Error(codes.NotFound, "container c1 not found"),
			wantCode: codes.NotFound,
			wantMsg:  "container c1 not found",
		},
		{
			name:     "wrapped downstream status: code kept, one readable sentence",
			err:      fmt.Errorf("runtime %q is unavailable: %w", "vm", unavailable),
			wantCode: codes.Unavailable,
			wantMsg:  `runtime "vm" is unavailable: connection error: dial unix /run/vm.sock: connect: no such file or directory`,
		},
		{
			name:     "downstream status wrapped twice",
			err:      fmt.Errorf("a: %w", fmt.Errorf("b: %w", status.Error(codes.Internal, "boom"))),
			wantCode: codes.Internal,
			wantMsg:  "a: b: boom",
		},
		{
			name:     "downstream status wrapped in the middle of a message",
			err:      fmt.Errorf("pull %q: %w (after 3 tries)", "busybox", status.Error(codes.Unavailable, "registry down")),
			wantCode: codes.Unavailable,
			wantMsg:  `pull "busybox": registry down (after 3 tries)`,
		},
		{
			name:     "plain error is Unknown",
			err:      errors.New("boom"),
			wantCode: codes.Unknown,
			wantMsg:  "boom",
		},
		{
			name:     "context deadline",
			err:      fmt.Errorf("status of vm: %w", context.DeadlineExceeded),
			wantCode: codes.DeadlineExceeded,
			wantMsg:  "status of vm: context deadline exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ToGRPC(tt.err)
			s, ok := status.FromError(got)
			if !ok {
				t.Fatalf("ToGRPC(%v) = %v, not a gRPC status", tt.err, got)
			}
			if s.Code() != tt.wantCode {
				t.Errorf("code = %v, want %v", s.Code(), tt.wantCode)
			}
			if s.Message() != tt.wantMsg {
				t.Errorf("message = %q, want %q", s.Message(), tt.wantMsg)
			}
			if strings.Contains(s.Message(), "rpc error:") {
				t.Errorf("message %q repeats the rpc error prefix", s.Message())
			}
		})
	}
}

func TestToGRPCNil(t *testing.T) {
	if err := ToGRPC(nil); err != nil {
		t.Fatalf("ToGRPC(nil) = %v, want nil", err)
	}
}

// A runtime's status details (a RetryInfo, say) reach the client untouched.
func TestToGRPCKeepsDetailsOfABareStatus(t *testing.T) {
	st, err := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{})
	if err != nil {
		t.Fatal(err)
	}
	got := status.Convert(ToGRPC(st.Err()))
	if !proto.Equal(got.Proto(), st.Proto()) {
		t.Errorf("ToGRPC changed a bare status:\n got %v\nwant %v", got.Proto(), st.Proto())
	}
}

func TestPredicates(t *testing.T) {
	if !IsNotFound(fmt.Errorf("x: %w", ErrNotFound)) || !IsNotFound(status.Error(codes.NotFound, "x")) {
		t.Error("IsNotFound misses a NotFound")
	}
	if IsNotFound(errors.New("not found")) {
		t.Error("IsNotFound matches a plain error by its text")
	}
	if !IsUnavailable(fmt.Errorf("x: %w", status.Error(codes.Unavailable, "x"))) || !IsUnavailable(ErrUnavailable) {
		t.Error("IsUnavailable misses an Unavailable")
	}
	if IsUnavailable(nil) {
		t.Error("IsUnavailable(nil)")
	}
}
