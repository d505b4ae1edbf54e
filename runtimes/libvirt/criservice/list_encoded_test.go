package criservice

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// encodedContainers decodes EncodedContainers' answer.
func encodedContainers(t *testing.T, r *Service, f *runtimeapi.ContainerFilter, ids idcodec.Codec) []*runtimeapi.Container {
	t.Helper()
	b, err := r.EncodedContainers(context.Background(), f, ids)
	if err != nil {
		t.Fatal(err)
	}
	var resp runtimeapi.ListContainersResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Containers
}

func encodedSandboxes(t *testing.T, r *Service, f *runtimeapi.PodSandboxFilter, ids idcodec.Codec) []*runtimeapi.PodSandbox {
	t.Helper()
	b, err := r.EncodedSandboxes(context.Background(), f, ids)
	if err != nil {
		t.Fatal(err)
	}
	var resp runtimeapi.ListPodSandboxResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Items
}

// decodedList is what crimux's lists got before: the runtime's list
// through the ID codec.
func decodedList[M proto.Message](t *testing.T, resp M, err error, ids idcodec.Codec) M {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	idcodec.Rewrite(resp, ids.Encode)
	return resp
}

func putLabelledVMs(t *testing.T, e *coretest.Env) {
	t.Helper()
	for i, st := range []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING,
		runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING} {
		sbID, id := fmt.Sprintf("sb%d", i), fmt.Sprintf("c%d", i)
		e.PutPod(t, sbID, func(sb *store.Sandbox) {
			sb.Config.Labels = map[string]string{"app": fmt.Sprint("a", i%2)}
			sb.Config.Annotations = map[string]string{"note": sbID}
			if st != runtimeapi.ContainerState_CONTAINER_RUNNING {
				sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			}
		})
		c := e.PutVM(t, sbID, id, st, vmtypes.PowerRunning)
		c.Config.Labels = map[string]string{"app": fmt.Sprint("a", i%2)}
		c.Config.Annotations = map[string]string{"io.kubernetes.container.restartCount": "0"}
		c.ImageRef = "sha256:" + id
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
	}
}

// The encoded lists are the lists crimux built from ListContainers and
// ListPodSandbox, with the IDs clients see, for every kind of filter.
func TestEncodedListsAreTheLists(t *testing.T) {
	t.Parallel()
	r, e := newService(t)
	putLabelledVMs(t, e)
	ctx := context.Background()
	vm := idcodec.New("vm")
	for _, ids := range []idcodec.Codec{vm, {}} {
		for _, f := range []*runtimeapi.ContainerFilter{nil, {},
			{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}},
			{LabelSelector: map[string]string{"app": "a0"}},
			{Id: ids.Encode("c1")}, {PodSandboxId: ids.Encode("sb2")}, {Id: "vm--nope"}} {
			inner := innerFilter(f, ids)
			resp, err := r.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: inner})
			want := decodedList(t, resp, err, ids).Containers
			for range 2 { // encoded, then cached
				if got := encodedContainers(t, r, f, ids); !proto.Equal(&runtimeapi.ListContainersResponse{Containers: got}, &runtimeapi.ListContainersResponse{Containers: want}) {
					t.Fatalf("codec %+v filter %v: encoded %v, want %v", ids, f, got, want)
				}
			}
		}
		for _, f := range []*runtimeapi.PodSandboxFilter{nil,
			{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}},
			{LabelSelector: map[string]string{"app": "a1"}}, {Id: ids.Encode("sb0")}} {
			resp, err := r.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: innerFilter(f, ids)})
			want := decodedList(t, resp, err, ids).Items
			for range 2 {
				if got := encodedSandboxes(t, r, f, ids); !proto.Equal(&runtimeapi.ListPodSandboxResponse{Items: got}, &runtimeapi.ListPodSandboxResponse{Items: want}) {
					t.Fatalf("codec %+v filter %v: encoded %v, want %v", ids, f, got, want)
				}
			}
		}
	}
	if got := encodedContainers(t, r, nil, vm); len(got) != 3 || got[0].Id != "vm--c0" || got[0].PodSandboxId != "vm--sb0" {
		t.Fatalf("encoded list %v; want 3 VMs with prefixed IDs", got)
	}
}

// A kept item follows its record: a new state, a resized config, a
// removed VM are in the next list.
func TestEncodedItemFollowsItsRecord(t *testing.T) {
	t.Parallel()
	r, e := newService(t)
	putLabelledVMs(t, e)
	vm := idcodec.New("vm")
	_ = encodedContainers(t, r, nil, vm)
	_ = encodedSandboxes(t, r, nil, vm)

	c, err := r.Store.Container("c0")
	if err != nil {
		t.Fatal(err)
	}
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.Config = proto.Clone(c.Config).(*runtimeapi.ContainerConfig)
	c.Config.Annotations = map[string]string{"io.kubernetes.container.restartCount": "1"}
	if err := r.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	if err := r.Store.DeleteContainer("c2"); err != nil {
		t.Fatal(err)
	}
	sb, err := r.Store.Sandbox("sb1")
	if err != nil {
		t.Fatal(err)
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_READY
	if err := r.Store.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}

	got := encodedContainers(t, r, nil, vm)
	if len(got) != 2 || got[0].State != runtimeapi.ContainerState_CONTAINER_EXITED || got[0].Annotations["io.kubernetes.container.restartCount"] != "1" {
		t.Fatalf("after the changes: %v; want c0 exited with restartCount 1, c1, and no c2", got)
	}
	sbs := encodedSandboxes(t, r, &runtimeapi.PodSandboxFilter{Id: "vm--sb1"}, vm)
	if len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sb1 after the change: %v; want READY", sbs)
	}
	r.containerItems.mu.Lock()
	_, kept := r.containerItems.entries["c2"]
	r.containerItems.mu.Unlock()
	if kept {
		t.Fatal("the removed VM's item is still kept after an unfiltered list")
	}
}

// While the store is not written, an unfiltered list is the answer of
// the one before, the same bytes; a write, or other IDs, make it anew.
func TestUnchangedStoreListsTheSameBytes(t *testing.T) {
	t.Parallel()
	r, e := newService(t)
	putLabelledVMs(t, e)
	ctx, vm := context.Background(), idcodec.New("vm")
	first, err := r.EncodedContainers(ctx, nil, vm)
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.EncodedContainers(ctx, &runtimeapi.ContainerFilter{}, vm)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || &again[0] != &first[0] {
		t.Fatal("an unchanged store's list was made again")
	}
	if plain := encodedContainers(t, r, nil, idcodec.Codec{}); len(plain) != 3 || plain[0].Id != "c0" {
		t.Fatalf("with the primary's IDs: %v; want c0 unprefixed", plain)
	}
	if err := r.Store.DeleteContainer("c2"); err != nil {
		t.Fatal(err)
	}
	if got := encodedContainers(t, r, nil, vm); len(got) != 2 {
		t.Fatalf("after a removal: %d VMs, want 2", len(got))
	}
	if got := encodedSandboxes(t, r, nil, vm); len(got) != 3 {
		t.Fatalf("pods: %d, want 3", len(got))
	}
	if err := r.Store.DeleteSandbox("sb2"); err != nil {
		t.Fatal(err)
	}
	if got := encodedSandboxes(t, r, nil, vm); len(got) != 2 {
		t.Fatalf("after a pod's removal: %d pods, want 2", len(got))
	}
}

// BenchmarkListContainers300: 300 VMs as kubelet lists them through
// crimux: the list, copied by the in-process call, its IDs rewritten and
// encoded (decoded), against the kept encodings (encoded).
func BenchmarkListContainers300(b *testing.B) {
	r, e := newService(b)
	for i := range 300 {
		sbID, id := fmt.Sprintf("%064d", i+1000), fmt.Sprintf("%064d", i)
		e.PutPod(b, sbID, nil)
		c := e.PutVM(b, sbID, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		c.ImageRef = "sha256:0123456789012345678901234567890123456789012345678901234567890123"
		c.Config.Labels = map[string]string{"io.kubernetes.container.name": "vm", "io.kubernetes.pod.name": "pod-" + sbID[60:],
			"io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-" + sbID[56:]}
		c.Config.Annotations = map[string]string{"io.kubernetes.container.hash": "abc", "io.kubernetes.container.restartCount": "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File", "io.kubernetes.pod.terminationGracePeriod": "30"}
		if err := r.Store.PutContainer(c); err != nil {
			b.Fatal(err)
		}
	}
	ctx, vm := context.Background(), idcodec.New("vm")
	b.Run("decoded", func(b *testing.B) {
		for b.Loop() {
			resp, err := r.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				b.Fatal(err)
			}
			cp := &runtimeapi.ListContainersResponse{}
			proto.Merge(cp, resp)
			idcodec.Rewrite(cp, vm.Encode)
			if _, err := proto.Marshal(cp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.EncodedContainers(ctx, nil, vm); err != nil {
				b.Fatal(err)
			}
		}
	})
}
