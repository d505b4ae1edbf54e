package cri

import (
	"context"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// eventRetry bounds the backoff between reconnects of a runtime's event
// stream.
const (
	eventRetryMin = 200 * time.Millisecond
	eventRetryMax = 5 * time.Second
)

// GetContainerEvents merges the event streams of every runtime into one.
// A runtime's stream that breaks (containerd restarting) is reopened with
// backoff for as long as the client listens; events lost meanwhile are
// covered by kubelet's periodic relist.
func (s *Server) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ctx := stream.Context()
	var sendMu sync.Mutex
	send := func(ev *runtimeapi.ContainerEventResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(ev)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	for _, rt := range s.reg.Load().Backends() {
		go func() {
			if err := s.followEvents(ctx, rt, req, send); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc: // the client went away
		return err
	}
}

// followEvents copies one runtime's events until ctx ends or sending to
// the client fails (that error is returned).
func (s *Server) followEvents(ctx context.Context, rt *registry.Runtime, req *runtimeapi.GetEventsRequest, send func(*runtimeapi.ContainerEventResponse) error) error {
	delay := eventRetryMin
	for ctx.Err() == nil {
		es, err := rt.Backend.Runtime().GetContainerEvents(ctx, req)
		for err == nil {
			var ev *runtimeapi.ContainerEventResponse
			if ev, err = es.Recv(); err == nil {
				delay = eventRetryMin
				if serr := send(ev); serr != nil {
					return serr
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		s.logger(ctx).Warn("event stream broke, reopening", "runtime", rt.Name, "err", err, "in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, eventRetryMax)
	}
	return nil
}
