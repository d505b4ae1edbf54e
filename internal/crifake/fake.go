// Package crifake is a hand-written fake CRI v1 runtime for tests: a
// RuntimeService and ImageService gRPC server holding pods, containers and
// images in memory, served over a real unix socket (as Kubernetes'
// cri-client tests do). Each test makes its own Fake and configures it:
// canned items, an injected error or a replacement handler per method. The
// fake records every request it receives with the deadline the caller set,
// so tests can check what reached the runtime and when it would time out.
//
// The fake is a little stateful, like a runtime: RunPodSandbox and
// CreateContainer add items, Stop and Remove of an unknown ID answer
// NotFound (real runtimes may be more lenient; crimux must not depend on
// it).
package crifake

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Call is one request the fake received.
type Call struct {
	// Method is the short RPC name, "StopContainer".
	Method string
	// Request is a copy of the request message.
	Request proto.Message
	// Deadline is the caller's deadline; zero when it set none.
	Deadline time.Time
	// Received is when the fake saw the call.
	Received time.Time
}

// Timeout is how long the caller gave the call when it arrived; ok is false
// when the call had no deadline.
func (c Call) Timeout() (d time.Duration, ok bool) {
	if c.Deadline.IsZero() {
		return 0, false
	}
	return c.Deadline.Sub(c.Received), true
}

// HandlerFunc replaces the fake's own handling of one unary method.
type HandlerFunc func(ctx context.Context, req proto.Message) (proto.Message, error)

// Fake is an in-memory CRI runtime. The zero value is not usable; call New.
type Fake struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	name string

	mu         sync.Mutex
	nextID     int
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	images     []*runtimeapi.Image
	events     []*runtimeapi.ContainerEventResponse
	status     *runtimeapi.StatusResponse
	metrics    []*runtimeapi.MetricDescriptor
	errs       map[string]error
	handlers   map[string]HandlerFunc
	calls      []Call
	listeners  map[*eventListener]bool
}

// eventListener is one open GetContainerEvents stream.
type eventListener struct {
	events chan *runtimeapi.ContainerEventResponse
	done   chan struct{}
}

// New returns an empty fake runtime named name (used in IDs it mints, its
// Status info and its filesystem mountpoints), ready and with a network.
func New(name string) *Fake {
	return &Fake{
		name: name,
		status: &runtimeapi.StatusResponse{
			Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
				{Type: runtimeapi.RuntimeReady, Status: true},
				{Type: runtimeapi.NetworkReady, Status: true},
			}},
			Info: map[string]string{"fake": name},
		},
		metrics:   []*runtimeapi.MetricDescriptor{{Name: "container_cpu_usage_seconds_total", Help: "cpu"}},
		errs:      map[string]error{},
		handlers:  map[string]HandlerFunc{},
		listeners: map[*eventListener]bool{},
	}
}

// Name returns the fake's name.
func (f *Fake) Name() string { return f.name }

// AddSandboxes adds pods as they are (copies).
func (f *Fake) AddSandboxes(sbs ...*runtimeapi.PodSandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range sbs {
		f.sandboxes = append(f.sandboxes, proto.Clone(sb).(*runtimeapi.PodSandbox))
	}
}

// AddContainers adds containers as they are (copies).
func (f *Fake) AddContainers(cs ...*runtimeapi.Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		f.containers = append(f.containers, proto.Clone(c).(*runtimeapi.Container))
	}
}

// AddImages adds images as they are (copies).
func (f *Fake) AddImages(imgs ...*runtimeapi.Image) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, img := range imgs {
		f.images = append(f.images, proto.Clone(img).(*runtimeapi.Image))
	}
}

// SetEvents sets the events GetContainerEvents sends to every new stream
// before it blocks until the caller goes away.
func (f *Fake) SetEvents(evs ...*runtimeapi.ContainerEventResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = clones(evs)
}

// Emit sends ev to every open GetContainerEvents stream, waiting until
// each has taken it or gone away.
func (f *Fake) Emit(ev *runtimeapi.ContainerEventResponse) {
	f.mu.Lock()
	listeners := make([]*eventListener, 0, len(f.listeners))
	for l := range f.listeners {
		listeners = append(listeners, l)
	}
	f.mu.Unlock()
	for _, l := range listeners {
		select {
		case l.events <- proto.Clone(ev).(*runtimeapi.ContainerEventResponse):
		case <-l.done:
		}
	}
}

// EventListeners returns the number of open GetContainerEvents streams.
func (f *Fake) EventListeners() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.listeners)
}

// SetStatus sets the answer of Status.
func (f *Fake) SetStatus(resp *runtimeapi.StatusResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = proto.Clone(resp).(*runtimeapi.StatusResponse)
}

// SetError makes method (short name, "StopContainer") fail with err until
// it is set to nil. The call is still recorded.
func (f *Fake) SetError(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.errs, method)
		return
	}
	f.errs[method] = err
}

// Handle replaces the fake's handling of a unary method; nil restores it.
func (f *Fake) Handle(method string, fn HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.handlers, method)
		return
	}
	f.handlers[method] = fn
}

// Calls returns the calls of method received so far, oldest first; ""
// returns every call.
func (f *Fake) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// LastCall returns the latest call of method; ok is false when there is none.
func (f *Fake) LastCall(method string) (Call, bool) {
	calls := f.Calls(method)
	if len(calls) == 0 {
		return Call{}, false
	}
	return calls[len(calls)-1], true
}

// ResetCalls forgets the calls recorded so far.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// record notes a call and returns the injected error or replacement
// handler of its method.
func (f *Fake) record(ctx context.Context, fullMethod string, req any) (error, HandlerFunc) {
	method := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	c := Call{Method: method, Received: time.Now()}
	if m, ok := req.(proto.Message); ok {
		c.Request = proto.Clone(m)
	}
	if d, ok := ctx.Deadline(); ok {
		c.Deadline = d
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.errs[method], f.handlers[method]
}

func (f *Fake) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	err, fn := f.record(ctx, info.FullMethod, req)
	switch {
	case err != nil:
		return nil, err
	case fn != nil:
		return fn(ctx, req.(proto.Message))
	}
	return handler(ctx, req)
}

func (f *Fake) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &recordingStream{ServerStream: ss, f: f, method: info.FullMethod})
}

// recordingStream records the request of a server-streaming call when the
// generated handler reads it, and fails the call with an injected error.
type recordingStream struct {
	grpc.ServerStream
	f      *Fake
	method string
}

func (s *recordingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	// The generated handler returns an injected error before calling the fake.
	err, _ := s.f.record(s.Context(), s.method, m)
	return err
}

// newID mints an ID unique within this fake.
func (f *Fake) newID(kind string) string {
	f.nextID++
	return fmt.Sprintf("%s-%s-%d", f.name, kind, f.nextID)
}

func notFound(kind, id string) error {
	return status.Errorf(codes.NotFound, "%s %q not found", kind, id)
}

func clones[T proto.Message](in []T) []T {
	out := make([]T, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(T)
	}
	return out
}

// sandbox and container find items by exact ID; the caller holds f.mu.
func (f *Fake) sandbox(id string) (int, *runtimeapi.PodSandbox) {
	i := slices.IndexFunc(f.sandboxes, func(sb *runtimeapi.PodSandbox) bool { return sb.Id == id })
	if i < 0 {
		return -1, nil
	}
	return i, f.sandboxes[i]
}

func (f *Fake) container(id string) (int, *runtimeapi.Container) {
	i := slices.IndexFunc(f.containers, func(c *runtimeapi.Container) bool { return c.Id == id })
	if i < 0 {
		return -1, nil
	}
	return i, f.containers[i]
}

func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Filters match like containerd's: an ID filter matches an ID or a prefix
// of one.
func matchSandbox(f *runtimeapi.PodSandboxFilter, sb *runtimeapi.PodSandbox) bool {
	return strings.HasPrefix(sb.Id, f.GetId()) &&
		(f.GetState() == nil || f.GetState().State == sb.State) &&
		matchLabels(f.GetLabelSelector(), sb.Labels)
}

func matchContainer(f *runtimeapi.ContainerFilter, c *runtimeapi.Container) bool {
	return strings.HasPrefix(c.Id, f.GetId()) &&
		strings.HasPrefix(c.PodSandboxId, f.GetPodSandboxId()) &&
		(f.GetState() == nil || f.GetState().State == c.State) &&
		matchLabels(f.GetLabelSelector(), c.Labels)
}
