package nodeagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/internal/errdefs"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// fakeVMs is the VM API of one VM in memory. It records its calls as
// "Method arg" and answers with its fields.
type fakeVMs struct {
	mu    sync.Mutex
	state vmv1.PowerState
	calls []string
	// Errors of the calls; nil: success.
	getErr, setErr, rebootErr, snapshotErr, restoreErr, deleteErr, listErr error
	// snapshots are the VM's, oldest first: CreateSnapshot adds one,
	// DeleteSnapshot removes one (NotFound if it has none of that name).
	snapshots []*vmv1.Snapshot
	// restoreState is the state RestoreSnapshot leaves the VM in.
	restoreState vmv1.PowerState
	// reboot is what RebootVM answers.
	reboot *vmv1.RebootVMResponse
	// during, if set, runs inside each action (not GetVM), before it
	// answers.
	during func()
	// refuse, if set, fails each action before it would act (its checks:
	// the VM not running, say), so the before-act hook never runs.
	refuse error
	// container and domain are the ContainerState and DomainState GetVM
	// reports.
	container, domain string
	// mig scripts the migration calls (migrate_fakes_test.go).
	mig fakeMigration
}

func newFakeVMs(state vmv1.PowerState) *fakeVMs {
	return &fakeVMs{state: state, restoreState: vmv1.PowerState_POWER_STATE_RUNNING,
		reboot: &vmv1.RebootVMResponse{Method: vmv1.RebootMethod_REBOOT_METHOD_SOFT}}
}

// call records a call; an action (not GetVM) calls the caller's
// before-act hook first, as the VM API does once its checks pass, then
// during.
func (f *fakeVMs) call(ctx context.Context, format string, args ...any) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	during, refuse := f.during, f.refuse
	f.mu.Unlock()
	if reads[format] {
		return ctx.Err()
	}
	if refuse != nil {
		return refuse
	}
	if err := vmtypes.BeforeAct(ctx); err != nil {
		return err
	}
	if during != nil {
		during()
	}
	return ctx.Err()
}

// reads are the calls that change nothing: no before-act hook, not
// actions.
var reads = map[string]bool{"GetVM": true, "ListSnapshots": true}

// actions are the calls other than reads.
func (f *fakeVMs) actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.calls), func(c string) bool { return reads[c] })
}

// count is how many calls of name (a read) were made.
func (f *fakeVMs) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == name {
			n++
		}
	}
	return n
}

func (f *fakeVMs) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func (f *fakeVMs) GetVM(ctx context.Context, req *vmv1.GetVMRequest) (*vmv1.GetVMResponse, error) {
	if err := f.call(ctx, "GetVM"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getErr != nil {
		return nil, f.getErr
	}
	pod := req.GetVm().GetPod()
	return &vmv1.GetVMResponse{Vm: &vmv1.VM{Namespace: pod.GetNamespace(), Name: pod.GetName(), PowerState: f.state,
		ContainerState: f.container, DomainState: f.domain}}, nil
}

func (f *fakeVMs) SetPowerState(ctx context.Context, req *vmv1.SetPowerStateRequest) (*vmv1.SetPowerStateResponse, error) {
	if err := f.call(ctx, "SetPowerState %s", powerStateName(req.GetState())); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return nil, f.setErr
	}
	prev := f.state
	f.state = req.GetState()
	return &vmv1.SetPowerStateResponse{Previous: prev, State: f.state}, nil
}

func (f *fakeVMs) RebootVM(ctx context.Context, _ *vmv1.RebootVMRequest) (*vmv1.RebootVMResponse, error) {
	if err := f.call(ctx, "RebootVM"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reboot, f.rebootErr
}

func (f *fakeVMs) CreateSnapshot(ctx context.Context, req *vmv1.CreateSnapshotRequest) (*vmv1.CreateSnapshotResponse, error) {
	if err := f.call(ctx, "CreateSnapshot %s", req.GetSnapshotName()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snapshotErr != nil {
		return nil, f.snapshotErr
	}
	s := &vmv1.Snapshot{Name: req.GetSnapshotName(), Description: req.GetDescription(), CreatedAt: int64(1796126400 + len(f.snapshots))}
	f.snapshots = append(f.snapshots, s)
	return &vmv1.CreateSnapshotResponse{Snapshot: s}, nil
}

func (f *fakeVMs) DeleteSnapshot(ctx context.Context, req *vmv1.DeleteSnapshotRequest) (*vmv1.DeleteSnapshotResponse, error) {
	if err := f.call(ctx, "DeleteSnapshot %s", req.GetSnapshotName()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleteErr != nil {
		return nil, f.deleteErr
	}
	i := slices.IndexFunc(f.snapshots, func(s *vmv1.Snapshot) bool { return s.GetName() == req.GetSnapshotName() })
	if i < 0 {
		return nil, fmt.Errorf("snapshot_name %q: the VM has no snapshot of that name: %w", req.GetSnapshotName(), errdefs.ErrNotFound)
	}
	f.snapshots = slices.Delete(f.snapshots, i, i+1)
	return &vmv1.DeleteSnapshotResponse{}, nil
}

func (f *fakeVMs) ListSnapshots(ctx context.Context, _ *vmv1.ListSnapshotsRequest) (*vmv1.ListSnapshotsResponse, error) {
	if err := f.call(ctx, "ListSnapshots"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return &vmv1.ListSnapshotsResponse{Snapshots: slices.Clone(f.snapshots)}, nil
}

func (f *fakeVMs) RestoreSnapshot(ctx context.Context, req *vmv1.RestoreSnapshotRequest) (*vmv1.RestoreSnapshotResponse, error) {
	if err := f.call(ctx, "RestoreSnapshot %s", req.GetSnapshotName()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.restoreErr != nil {
		return nil, f.restoreErr
	}
	f.state = f.restoreState
	return &vmv1.RestoreSnapshotResponse{State: f.state}, nil
}

// fakeKube records the agent's writes to the API server.
// Resource versions count up across the pod's writes, the agent's and
// the user's, as etcd's revision does.
type fakeKube struct {
	mu       sync.Mutex
	patches  []map[string]*string
	events   []event
	patchErr error
	version  uint64
}

func (k *fakeKube) patchAnnotations(_ context.Context, _ *corev1.Pod, changes map[string]*string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.patchErr != nil {
		return "", k.patchErr
	}
	k.patches = append(k.patches, maps.Clone(changes))
	k.version++
	return strconv.FormatUint(k.version, 10), nil
}

// nextVersion is the resource version of a write other than the agent's.
func (k *fakeKube) nextVersion() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version++
	return strconv.FormatUint(k.version, 10)
}

func (k *fakeKube) recordEvent(_ context.Context, _ *corev1.Pod, eventType, reason, message string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, event{eventType, reason, message})
	return nil
}

// take returns the patches and events recorded since the last take.
func (k *fakeKube) take() ([]map[string]*string, []event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, e := k.patches, k.events
	k.patches, k.events = nil, nil
	return p, e
}

// harness is a reconciler over fakes, its records in a temp dir, and the
// pod as the API server holds it.
type harness struct {
	t    *testing.T
	vms  *fakeVMs
	kube *fakeKube
	dir  string
	rec  *reconciler
	pod  *corev1.Pod
}

func newHarness(t *testing.T, state vmv1.PowerState, annotations map[string]string) *harness {
	t.Helper()
	h := &harness{t: t, vms: newFakeVMs(state), kube: &fakeKube{version: 1}, dir: t.TempDir(), pod: testPod(annotations)}
	h.restart()
	return h
}

// restart makes a new reconciler over the same records, as a crimux
// restart does.
func (h *harness) restart() {
	h.t.Helper()
	records, err := newRecordStore(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	clock := func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }
	h.rec = &reconciler{
		vms: h.vms, kube: h.kube, records: records, sent: newSentPatches(clock),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: clock,
	}
}

// pass reconciles the pod and applies the patch the reconcile sent to
// it, as the API server would.
func (h *harness) pass() (again bool, patches []map[string]*string, events []event) {
	h.t.Helper()
	again, err := h.rec.reconcile(context.Background(), h.pod)
	if err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	patches, events = h.kube.take()
	for _, p := range patches {
		h.pod = withPatch(h.pod, p)
	}
	if len(patches) > 0 {
		h.pod.ResourceVersion = strconv.FormatUint(h.kube.version, 10)
	}
	return again, patches, events
}

// annotate sets (or, with nil, removes) a user's annotation.
func (h *harness) annotate(key string, value *string) {
	h.pod = withPatch(h.pod, map[string]*string{key: value})
	h.pod.ResourceVersion = h.kube.nextVersion()
}

func testPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "vm1", UID: types.UID("6f1c2a5e-0000-4000-8000-000000000001"),
			Annotations: annotations, ResourceVersion: "1",
		},
		Spec:   corev1.PodSpec{NodeName: "node1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func withPatch(pod *corev1.Pod, changes map[string]*string) *corev1.Pod {
	pod = pod.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range changes {
		if v == nil {
			delete(pod.Annotations, k)
		} else {
			pod.Annotations[k] = *v
		}
	}
	return pod
}

func notFound(what string) error {
	return fmt.Errorf("vm %q: %s: %w", "default/vm1", what, errdefs.ErrNotFound)
}

// reasons lists the events' reasons.
func reasons(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.reason)
	}
	return out
}
