package cri_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// encodedVM is the VM runtime's backend with its lists kept encoded
// (registry.EncodedLister), as the real one has them: its answers are its
// runtime's lists, through the ID codec, encoded.
type encodedVM struct {
	registry.Backend
	mu      sync.Mutex
	filters []proto.Message // the filters it was asked with
}

func (b *encodedVM) asked(f proto.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.filters = append(b.filters, f)
}

func (b *encodedVM) askedWith() []proto.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]proto.Message(nil), b.filters...)
}

func (b *encodedVM) EncodedSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]byte, error) {
	b.asked(f)
	resp, err := b.Runtime().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	return proto.Marshal(resp)
}

func (b *encodedVM) EncodedContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]byte, error) {
	b.asked(f)
	resp, err := b.Runtime().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
	if err != nil {
		return nil, err
	}
	return proto.Marshal(resp)
}

// wrapEncoded gives the harness's VM runtime lists kept encoded; vm is
// set to its backend.
func wrapEncoded(vm **encodedVM) func(registry.Backend) registry.Backend {
	return func(b registry.Backend) registry.Backend {
		*vm = &encodedVM{Backend: b}
		return *vm
	}
}

// forEachVMBackend runs a list test with a VM runtime whose lists are
// decoded and encoded by crimux, and with one that keeps them encoded.
func forEachVMBackend(t *testing.T, test func(t *testing.T, newH func(*testing.T, time.Duration) *harness)) {
	t.Run("decoded", func(t *testing.T) {
		test(t, func(t *testing.T, callTimeout time.Duration) *harness { return newHarnessWith(t, callTimeout, nil) })
	})
	t.Run("encoded", func(t *testing.T) {
		test(t, func(t *testing.T, callTimeout time.Duration) *harness {
			var vm *encodedVM
			return newHarnessWith(t, callTimeout, wrapEncoded(&vm))
		})
	})
}

// Lists that ask every runtime take the VM runtime's encoded answer, and
// give it the client's filter as it came.
func TestListAsksEncodedListers(t *testing.T) {
	var vm *encodedVM
	h := newHarnessWith(t, 5*time.Second, wrapEncoded(&vm))
	h.seed()
	byLabel := &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "vm"}}
	if got, err := h.listContainers(t, byLabel); err != nil || !sameIDs(got, []string{"vm--c1"}) {
		t.Fatalf("ListContainers(app=vm) = %v, %v; want [vm--c1]", got, err)
	}
	if got, err := h.listSandboxes(t, nil); err != nil || !sameIDs(got, []string{"p1", "p2", "vm--p1"}) {
		t.Fatalf("ListPodSandbox = %v, %v", got, err)
	}
	filters := vm.askedWith()
	if len(filters) != 2 || !proto.Equal(filters[0], byLabel) || filters[1].ProtoReflect().IsValid() {
		t.Fatalf("the encoded lists were asked with %v; want the client's filters (app=vm, then none)", filters)
	}
	// A list owned by the VM runtime alone is not passed through.
	if got, err := h.listContainers(t, &runtimeapi.ContainerFilter{Id: "vm--c1"}); err != nil || !sameIDs(got, []string{"vm--c1"}) {
		t.Fatalf("ListContainers(vm--c1) = %v, %v", got, err)
	}
	if n := len(vm.askedWith()); n != 2 {
		t.Errorf("a list by one VM's ID asked the encoded list (%d asks); want the runtime's own list", n)
	}
}
