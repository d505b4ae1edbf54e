package criservice

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/gc"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
)

// collectNetworks runs a collector pass of e's runtime (libvirtd up:
// orphan namespaces included).
func collectNetworks(e *coretest.Env) gc.GCReport {
	return gc.New(e.R).CollectGarbage(context.Background(), false)
}

// TestStopPodSandboxReleasesTheNetworkAndRetries: a failed CNI DEL fails
// StopPodSandbox (kubelet retries) and stays owed; the collector (or the
// next call) finishes it, once.
func TestStopPodSandboxReleasesTheNetworkAndRetries(t *testing.T) {
	r, e := newService(t)
	f := e.Net
	e.PutPod(t, "sb1", nil)
	f.FailDel = errors.New("plugin bridge: exec: not found")
	_, err := r.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: "sb1"})
	if !errdefs.IsUnavailable(err) {
		t.Fatalf("StopPodSandbox with CNI DEL failing: %v, want Unavailable", err)
	}
	rep := collectNetworks(e)
	if rep.Pending != 1 {
		t.Fatalf("collector with DEL failing: %+v, want 1 pending", rep)
	}
	f.FailDel = nil
	rep = collectNetworks(e)
	if rep.Networks != 1 || rep.Pending != 0 || len(f.Teardowns) != 1 {
		t.Fatalf("collector after the plugin came back: %+v, teardowns %v", rep, f.Teardowns)
	}
	if _, err := r.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: "sb1"}); err != nil {
		t.Fatal(err)
	}
	if len(f.Teardowns) != 1 {
		t.Fatalf("network torn down again: %v", f.Teardowns)
	}
	st, err := r.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"})
	if err != nil || st.GetStatus().GetNetwork().GetIp() != "10.1.0.5" {
		t.Fatalf("status after stop: %v, %v; want the last known IP", st, err)
	}
	if n := e.Counters.Removed("network"); n != 1 {
		t.Fatalf("%d networks counted removed, want 1", n)
	}
}

// TestRemovePodSandboxHidesThePodUntilTheNetworkIsGone: removal succeeds
// for CRI at once; the record stays (Removing, unlisted) until DEL works.
func TestRemovePodSandboxHidesThePodUntilTheNetworkIsGone(t *testing.T) {
	r, e := newService(t)
	f := e.Net
	e.PutPod(t, "sb1", nil)
	f.FailDel = errors.New("host-local: lock timeout")
	if _, err := r.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "sb1"}); err != nil {
		t.Fatal(err)
	}
	list, _ := r.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if len(list.Items) != 0 {
		t.Fatalf("a removed pod is listed: %v", list.Items)
	}
	if _, err := r.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"}); !errdefs.IsNotFound(err) {
		t.Fatalf("status of a removed pod: %v, want NotFound", err)
	}
	if sb, err := r.Store.Sandbox("sb1"); err != nil || !sb.Removing {
		t.Fatalf("record: %+v, %v; want it kept, Removing", sb, err)
	}
	f.FailDel = nil
	collectNetworks(e)
	if _, err := r.Store.Sandbox("sb1"); !errdefs.IsNotFound(err) || len(f.Teardowns) != 1 {
		t.Fatalf("after the collector: record %v, teardowns %v", err, f.Teardowns)
	}
}

// TestRunPodSandboxPassesBandwidth: the pod's bandwidth annotations reach
// CNI (podnet's bandwidth capability) in bits per second; a bad one is
// InvalidArgument naming the annotation, before anything is made.
func TestRunPodSandboxPassesBandwidth(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "shaped")
	cfg.Annotations = map[string]string{vm.AnnotationIngressBandwidth: "10M", vm.AnnotationEgressBandwidth: "1Mi"}
	sb := runPod(t, s, cfg)
	if got, want := e.Net.SetupPods[sb].Bandwidth, (podnet.Bandwidth{Ingress: 10_000_000, Egress: 1 << 20}); got != want {
		t.Fatalf("CNI told bandwidth %+v, want %+v", got, want)
	}

	bad := podConfig(t, "badly-shaped")
	bad.Annotations = map[string]string{vm.AnnotationEgressBandwidth: "fast"}
	_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: bad, RuntimeHandler: "vm"})
	wantCode(t, "RunPodSandbox with a bad bandwidth", err, codes.InvalidArgument, "config.annotations["+vm.AnnotationEgressBandwidth+"]")
	if len(e.Net.Setups) != 1 {
		t.Fatalf("network setups %v, want the first pod's alone", e.Net.Setups)
	}
	if recs, _ := e.R.Store.Sandboxes(); len(recs) != 1 {
		t.Fatalf("%d pod records, want the first pod's alone", len(recs))
	}
}
