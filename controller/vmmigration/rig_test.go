package vmmigration

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/crimux/crimux/kubeapi"
)

// testMigUID is the UID the rig's migrations get: their target pod's
// name is migTarget.
const testMigUID = "uid-mig"

var migTarget = targetName("vm1", uidSuffix(testMigUID))

// rig is the fake cluster (its kubelet and node agents), the VMMigration
// objects in a fake dynamic client, and a controller running on them.
type rig struct {
	*fakeCluster
	store Store
	ctl   *Controller
	stop  func()
}

// newRig starts a controller with short waits (timeout: the migration's).
func newRig(t *testing.T, b behaviour, timeout time.Duration, pods ...*corev1.Pod) *rig {
	t.Helper()
	c := newFakeCluster(t, b, pods...)
	r := &rig{fakeCluster: c, store: Store{Client: fakeDynamic()}}
	r.ctl = &Controller{Client: c.client, Store: r.store, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics(prometheus.NewRegistry()),
		Timing: Timing{Timeout: timeout, GoneWait: 5 * time.Second, CleanupWait: 5 * time.Second, HintAfter: 200 * time.Millisecond, FinishWait: time.Minute}}
	r.start(t)
	return r
}

// start runs the controller until the test ends or r.stop.
func (r *rig) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.ctl.Run(ctx); close(done) }()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(func() { r.stop() })
}

// ask creates migration name of pod (to node, "" for the scheduler's).
func (r *rig) ask(t *testing.T, name, pod, node string) {
	t.Helper()
	r.askUID(t, name, pod, node, testMigUID)
}

func (r *rig) askUID(t *testing.T, name, pod, node, uid string) {
	t.Helper()
	m := &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID(uid),
		CreationTimestamp: metav1.Now()}, Spec: kubeapi.VMMigrationSpec{Pod: pod, TargetNode: node}}
	if _, err := r.store.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// migrate asks for a migration of pod to node and waits for its end.
func (r *rig) migrate(t *testing.T, pod, node string) *kubeapi.VMMigration {
	t.Helper()
	r.ask(t, "mig", pod, node)
	return r.waitFinal(t, "mig")
}

// waitFinal waits for migration name's final phase.
func (r *rig) waitFinal(t *testing.T, name string) *kubeapi.VMMigration {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := r.store.Get(context.Background(), testNS, name)
		if err == nil && kubeapi.Final(m.Status.Phase) {
			t.Logf("migration %s: %s %s: %s\nevents:\n%s", name, m.Status.Phase, m.Status.Reason, m.Status.Message, r.story(t))
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("migration %s not over after 20s: %+v, %v\nevents:\n%s", name, m, err, r.story(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// story is the events' messages, in the order they were recorded, one
// per line as "Reason: message".
func (r *rig) story(t *testing.T) string {
	t.Helper()
	l, err := r.client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs := l.Items
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Time.Before(evs[j].FirstTimestamp.Time) })
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.InvolvedObject.Kind + " " + e.InvolvedObject.Name + " " + e.Reason + ": " + e.Message + "\n")
	}
	return b.String()
}

// wantEnd fails unless m ended in phase with reason, its message
// holding each of words.
func wantEnd(t *testing.T, m *kubeapi.VMMigration, phase, reason string, words ...string) {
	t.Helper()
	if m.Status.Phase != phase || m.Status.Reason != reason {
		t.Fatalf("migration ended %s %s (%s), want %s %s", m.Status.Phase, m.Status.Reason, m.Status.Message, phase, reason)
	}
	for _, w := range words {
		if !strings.Contains(m.Status.Message, w) {
			t.Errorf("message %q lacks %q", m.Status.Message, w)
		}
	}
}

// unstructuredSet sets fields... of obj to v.
func unstructuredSet(obj map[string]any, v any, fields ...string) error {
	for _, f := range fields[:len(fields)-1] {
		next, ok := obj[f].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[f] = next
		}
		obj = next
	}
	obj[fields[len(fields)-1]] = v
	return nil
}

// fakeDynamic is the fake dynamic client holding VMMigrations, whose
// status updates change the status alone, as the API server's status
// subresource does (the fake's own would write the spec too, undoing a
// cancel).
func fakeDynamic() *dynamicfake.FakeDynamicClient {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: kubeapi.VMMigrationKind + "List"})
	dyn.PrependReactor("update", GVR.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua, ok := a.(k8stesting.UpdateAction)
		if !ok || ua.GetSubresource() != "status" {
			return false, nil, nil
		}
		obj := ua.GetObject().(*unstructured.Unstructured)
		cur, err := dyn.Tracker().Get(GVR, obj.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		u := cur.(*unstructured.Unstructured).DeepCopy()
		u.Object["status"] = obj.Object["status"]
		if err := dyn.Tracker().Update(GVR, u, obj.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, u, nil
	})
	return dyn
}
