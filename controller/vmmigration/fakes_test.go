package vmmigration

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/crimux/crimux/kubeapi"
)

const testNS = "default"

// behaviour is what the fake cluster's agents and kubelet do.
type behaviour struct {
	noAgents      bool   // nobody answers (T still runs)
	targetRefuses string // T's agent refuses to prepare, saying so
	sourceFails   string // S's Migrate fails, saying so
	finishFails   string // T's FinishMigration fails, saying so
	noFinish      bool   // T's agent never calls FinishMigration
	arrivedAnyway bool   // S's Migrate fails, yet the VM runs in T
	forgedFinish  bool   // T's agent says the VM arrived as soon as it prepared
	sourceSilent  bool   // S's agent answers migrate-to, then never migrates
	staleFirst    bool   // S's agent first writes answers of an earlier attempt
	targetFails   bool   // kubelet refuses T (phase Failed, NodeAffinity)
	onTargetRun   func() // called once T runs
	onProgress    func() // called once S's agent reported progress
	onFinish      func() // called once T's agent wrote its finish
}

// fakeCluster is the fake clientset with a fake kubelet and two fake
// node agents: goroutines reacting on a watch to the annotations, as the
// real ones would (kubeapi/migration.go).
type fakeCluster struct {
	client *fake.Clientset
	b      behaviour

	mu   sync.Mutex
	once map[string]bool
}

func vmPod(name, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	vm := "vm"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"crimux.io/vm-cpus": "2", kubeapi.AnnotationPowerState: "Running"},
		},
		Spec: corev1.PodSpec{
			NodeName: node, RuntimeClassName: &vm,
			Containers: []corev1.Container{{Name: "vm", Image: "registry.example/debian:12"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.88.0.4",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vm", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, f := range mutate {
		f(p)
	}
	return p
}

func node(name string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}}},
	}
}

// newFakeCluster holds nodes node1, node2 (Ready) and node3 (not), and
// pods; its agents run until the test ends.
func newFakeCluster(t *testing.T, b behaviour, pods ...*corev1.Pod) *fakeCluster {
	objs := []runtime.Object{node("node1", corev1.ConditionTrue), node("node2", corev1.ConditionTrue), node("node3", corev1.ConditionFalse)}
	for _, p := range pods {
		objs = append(objs, p)
	}
	f := &fakeCluster{client: fake.NewClientset(objs...), b: b, once: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.agents(ctx, ready)
	}()
	<-ready
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f
}

// first reports whether key is new (each reaction is done once).
func (f *fakeCluster) first(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.once[key] {
		return false
	}
	f.once[key] = true
	return true
}

func (f *fakeCluster) agents(ctx context.Context, ready chan<- struct{}) {
	pods := f.client.CoreV1().Pods(testNS)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
	close(ready)
	for i := range list.Items {
		f.react(ctx, &list.Items[i])
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				f.react(ctx, p)
			}
		}
	}
}

func (f *fakeCluster) annotate(ctx context.Context, p *corev1.Pod, key string, v any) {
	s, err := kubeapi.EncodeAnnotation(v)
	if err != nil {
		panic(err)
	}
	patch, _ := kubeapi.AnnotationPatch(p.UID, map[string]*string{key: &s})
	_, _ = f.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

func (f *fakeCluster) react(ctx context.Context, p *corev1.Pod) {
	a := p.Annotations
	// A pod asked to migrate is a source, even one that arrived by
	// migration (the real agent tells that from its VM).
	to := a[kubeapi.AnnotationMigrateTo]
	if from := a[kubeapi.AnnotationMigrateFrom]; from != "" && to == "" {
		f.target(ctx, p, from)
		return
	}
	if to != "" && !f.b.noAgents {
		f.source(ctx, p, to)
	}
}

// target is T's kubelet and agent.
func (f *fakeCluster) target(ctx context.Context, p *corev1.Pod, from string) {
	a := p.Annotations
	if p.Status.Phase == "" && f.first("kubelet:"+p.Name) {
		q := p.DeepCopy()
		q.Status = corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vm", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
		if f.b.targetFails {
			q.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodeAffinity", Message: "Pod was rejected: Predicate NodeAffinity failed"}
		}
		_, _ = f.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, q, metav1.UpdateOptions{})
		return
	}
	if p.Status.Phase != corev1.PodRunning {
		return
	}
	if f.b.onTargetRun != nil && f.first("run:"+p.Name) {
		f.b.onTargetRun()
	}
	if f.b.noAgents || arrived(p) {
		return
	}
	token := "tok-" + p.Name
	var src kubeapi.MigrationSource
	if ok, _ := kubeapi.DecodeAnnotation(a, kubeapi.AnnotationMigrationSource, &src); ok && src.Target == p.Name && f.first("prepare:"+p.Name) {
		if f.b.targetRefuses != "" {
			f.annotate(ctx, p, kubeapi.AnnotationMigrationResult, kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: f.b.targetRefuses})
			return
		}
		f.annotate(ctx, p, kubeapi.AnnotationMigrationTarget, kubeapi.MigrationTarget{
			Source: from, LibvirtURI: "qemu+tls://10.0.0.2/system", Address: "10.0.0.2", Token: token,
			DomainXML: "<domain/>", DomainName: "crimux-x", Disks: []string{"vda"},
		})
		if f.b.forgedFinish {
			f.annotate(ctx, p, kubeapi.AnnotationMigrationFinish, kubeapi.MigrationFinish{Token: token, Phase: kubeapi.MigrationSucceeded})
		}
	}
	var res kubeapi.MigrationResult
	if ok, _ := kubeapi.DecodeAnnotation(a, kubeapi.AnnotationMigrationResult, &res); ok && res.Token == token && !f.b.noFinish && f.first("finish:"+p.Name) {
		fin := kubeapi.MigrationFinish{Token: token, Phase: kubeapi.MigrationSucceeded, DowntimeMS: 80, Addresses: []string{"10.88.78.5"}}
		switch {
		case res.Phase != kubeapi.MigrationSucceeded && f.b.arrivedAnyway:
			fin.Note = "the source reported the migration failed, but the VM arrived here"
		case res.Phase != kubeapi.MigrationSucceeded:
			fin = kubeapi.MigrationFinish{Token: token, Phase: kubeapi.MigrationFailed, Message: "the source failed: " + res.Message}
		case f.b.finishFails != "":
			fin = kubeapi.MigrationFinish{Token: token, Phase: kubeapi.MigrationFailed, Message: f.b.finishFails}
		}
		f.annotate(ctx, p, kubeapi.AnnotationMigrationFinish, fin)
		if f.b.onFinish != nil {
			f.b.onFinish()
		}
	}
}

// source is S's agent.
func (f *fakeCluster) source(ctx context.Context, p *corev1.Pod, to string) {
	a := p.Annotations
	if f.first("source:" + to) {
		if f.b.staleFirst {
			f.annotate(ctx, p, kubeapi.AnnotationMigrationSource, kubeapi.MigrationSource{Target: p.Name + "-mig-old00", ImageDigest: "sha256:old"})
			f.annotate(ctx, p, kubeapi.AnnotationMigrationResult, kubeapi.MigrationResult{Token: "tok-old", Phase: kubeapi.MigrationFailed, Message: "an old failure"})
			f.annotate(ctx, p, kubeapi.AnnotationMigrationProgress, kubeapi.MigrationProgress{Token: "tok-old", TotalBytes: 1 << 30, RemainingBytes: 1 << 29})
		}
		f.annotate(ctx, p, kubeapi.AnnotationMigrationSource, kubeapi.MigrationSource{
			Target: to, DomainXML: "<domain/>", GuestMAC: "52:54:00:12:34:56", ImageDigest: "sha256:0123456789abcdef0123",
		})
		return
	}
	var tgt kubeapi.MigrationTarget
	if ok, _ := kubeapi.DecodeAnnotation(a, kubeapi.AnnotationMigrationTarget, &tgt); !ok || tgt.Source != p.Namespace+"/"+p.Name || f.b.sourceSilent || !f.first("migrate:"+tgt.Token) {
		return
	}
	go func() {
		// Migrate streams, as the real agent's call does, off the watch.
		for _, pr := range []kubeapi.MigrationProgress{
			{Token: tgt.Token, ElapsedMS: 1000, TotalBytes: 512 << 20, ProcessedBytes: 212 << 20, RemainingBytes: 300 << 20, DirtyRateBytes: 3 << 20, Iteration: 1},
			{Token: tgt.Token, ElapsedMS: 2500, TotalBytes: 512 << 20, ProcessedBytes: 520 << 20, RemainingBytes: 20 << 20, DirtyRateBytes: 1 << 20, Iteration: 2},
		} {
			f.annotate(ctx, p, kubeapi.AnnotationMigrationProgress, pr)
			if f.b.onProgress != nil && f.first("progress:"+tgt.Token) {
				f.b.onProgress()
			}
		}
		res := kubeapi.MigrationResult{Token: tgt.Token, Phase: kubeapi.MigrationSucceeded}
		if f.b.sourceFails != "" {
			res = kubeapi.MigrationResult{Token: tgt.Token, Phase: kubeapi.MigrationFailed, Message: f.b.sourceFails}
		}
		f.annotate(ctx, p, kubeapi.AnnotationMigrationResult, res)
	}()
}

// patched lists, in order, each (pod, annotation key) first set to a
// value by a patch, by whoever (but the earlier attempt's answers the
// fake source agent writes with staleFirst).
func patched(c *fake.Clientset) []string {
	var seq []string
	seen := map[string]bool{}
	for _, a := range c.Actions() {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetResource().Resource != "pods" {
			continue
		}
		var p struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			continue
		}
		for k, v := range p.Metadata.Annotations {
			if key := pa.GetName() + " " + k; v != nil && !strings.Contains(*v, "old") && !seen[key] {
				seen[key] = true
				seq = append(seq, key)
			}
		}
	}
	return seq
}
