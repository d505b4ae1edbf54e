package inproc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// service is a RuntimeService that keeps what it answers, as a runtime
// with a cache would, and records what its handler saw.
type service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	kept      *runtimeapi.ContainerStatusResponse
	err       error
	block     bool
	sawCtx    context.Context
	sawID     string
	cancelled chan struct{}
}

type valueKey struct{}

func (s *service) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.sawCtx, s.sawID = ctx, req.GetContainerId()
	req.ContainerId = "changed by the handler"
	if s.block {
		<-ctx.Done()
		close(s.cancelled)
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.kept, nil
}

type fakeStreams struct{ method string }

func (f *fakeStreams) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return errors.New("not used")
}

func (f *fakeStreams) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	f.method = method
	return nil, errors.New("a stream")
}

func TestConn(t *testing.T) {
	newConn := func(s *service, server grpc.UnaryServerInterceptor, client grpc.UnaryClientInterceptor) (runtimeapi.RuntimeServiceClient, *fakeStreams) {
		streams := &fakeStreams{}
		return runtimeapi.NewRuntimeServiceClient(New(&runtimeapi.RuntimeService_ServiceDesc, s, server, client, streams)), streams
	}
	status1 := func() *runtimeapi.ContainerStatusResponse {
		return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	}

	t.Run("answers and requests are copies", func(t *testing.T) {
		s := &service{kept: status1()}
		rs, _ := newConn(s, nil, nil)
		req := &runtimeapi.ContainerStatusRequest{ContainerId: "c1"}
		resp, err := rs.ContainerStatus(context.Background(), req)
		if err != nil || resp.GetStatus().GetId() != "c1" || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("ContainerStatus = %v, %v", resp, err)
		}
		resp.Status.Id = "changed by the caller"
		if s.kept.GetStatus().GetId() != "c1" {
			t.Error("the caller changed what the runtime keeps")
		}
		if req.GetContainerId() != "c1" || s.sawID != "c1" {
			t.Errorf("the handler saw %q and left the caller's request as %q", s.sawID, req.GetContainerId())
		}
	})
	t.Run("both interceptors apply", func(t *testing.T) {
		s := &service{kept: status1()}
		var serverSaw string
		server := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			serverSaw = info.FullMethod
			return h(ctx, req)
		}
		client := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r := req.(*runtimeapi.ContainerStatusRequest)
			err := invoker(ctx, method, &runtimeapi.ContainerStatusRequest{ContainerId: strings.TrimPrefix(r.ContainerId, "vm--")}, reply, cc, opts...)
			reply.(*runtimeapi.ContainerStatusResponse).Status.Id = "vm--" + reply.(*runtimeapi.ContainerStatusResponse).Status.Id
			return err
		}
		rs, _ := newConn(s, server, client)
		resp, err := rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "vm--c1"})
		if err != nil || resp.GetStatus().GetId() != "vm--c1" || s.sawID != "c1" {
			t.Errorf("ContainerStatus = %v, %v; the handler saw %q", resp, err, s.sawID)
		}
		if serverSaw != runtimeapi.RuntimeService_ContainerStatus_FullMethodName {
			t.Errorf("server interceptor saw %q", serverSaw)
		}
		if s.kept.GetStatus().GetId() != "c1" {
			t.Error("the client interceptor rewrote what the runtime keeps")
		}
	})
	t.Run("errors as a client receives them", func(t *testing.T) {
		for _, tc := range []struct {
			err  error
			code codes.Code
		}{
			{status.Error(codes.NotFound, "no c1"), codes.NotFound},
			{errors.New("plain"), codes.Unknown},
			// grpc-go's server maps a handler's context errors to their
			// codes: a handler that ends with its deadline returns them.
			{context.DeadlineExceeded, codes.DeadlineExceeded},
			{context.Canceled, codes.Canceled},
		} {
			rs, _ := newConn(&service{err: tc.err}, nil, nil)
			_, err := rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1"})
			if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != status.Convert(tc.err).Message() {
				t.Errorf("handler error %v reached the caller as %v, want %s", tc.err, err, tc.code)
			}
		}
		rs, _ := newConn(&service{}, nil, nil)
		if _, err := rs.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{}); status.Code(err) != codes.Unimplemented {
			t.Errorf("unimplemented method = %v", err)
		}
	})
	t.Run("the handler's context: the caller's deadline, no values", func(t *testing.T) {
		s := &service{kept: status1()}
		rs, _ := newConn(s, nil, nil)
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), valueKey{}, "crimux's"), time.Minute)
		defer cancel()
		if _, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "c1"}); err != nil {
			t.Fatal(err)
		}
		want, _ := ctx.Deadline()
		if got, ok := s.sawCtx.Deadline(); !ok || !got.Equal(want) {
			t.Errorf("handler deadline %v (%v), want the caller's %v", got, ok, want)
		}
		if s.sawCtx.Value(valueKey{}) != nil {
			t.Error("the handler saw the caller's context values")
		}
		if s.sawCtx.Err() == nil {
			t.Error("the handler's context outlived the call")
		}
	})
	t.Run("a caller that gives up does not wait for the handler", func(t *testing.T) {
		s := &service{block: true, cancelled: make(chan struct{})}
		rs, _ := newConn(s, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "c1"})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("ContainerStatus past its deadline = %v, want DeadlineExceeded", err)
		}
		select {
		case <-s.cancelled:
		case <-time.After(5 * time.Second):
			t.Error("the handler's context was not cancelled")
		}
	})
	t.Run("streams go to the real connection", func(t *testing.T) {
		rs, streams := newConn(&service{}, nil, nil)
		if _, err := rs.GetContainerEvents(context.Background(), &runtimeapi.GetEventsRequest{}); err == nil {
			t.Error("no error from the fake stream")
		}
		if streams.method != runtimeapi.RuntimeService_GetContainerEvents_FullMethodName {
			t.Errorf("stream opened on %q", streams.method)
		}
	})
}
