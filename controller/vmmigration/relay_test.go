package vmmigration

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crimux/crimux/kubeapi"
)

var testRelay = relay{ns: testNS, source: "vm1", target: target, sourceUID: "uid-vm1", targetUID: "uid-t", node: "node2"}

func enc(t *testing.T, v any) string {
	t.Helper()
	s, err := kubeapi.EncodeAnnotation(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pods are S (asked to migrate to T) and T (running), with annotations.
func pods(sa, ta map[string]string) (*corev1.Pod, *corev1.Pod) {
	s := vmPod("vm1", "node1")
	s.Annotations = map[string]string{kubeapi.AnnotationMigrateTo: target}
	maps.Copy(s.Annotations, sa)
	tp := vmPod(target, "node2")
	tp.UID = "uid-t"
	tp.Annotations = map[string]string{kubeapi.AnnotationMigrateFrom: "default/vm1"}
	maps.Copy(tp.Annotations, ta)
	return s, tp
}

func TestNext(t *testing.T) {
	src := enc(t, kubeapi.MigrationSource{Target: target, ImageDigest: "sha256:1"})
	oldSrc := enc(t, kubeapi.MigrationSource{Target: "vm1-mig-old00"})
	tgt := enc(t, kubeapi.MigrationTarget{Source: "default/vm1", Token: "tok"})
	otherTgt := enc(t, kubeapi.MigrationTarget{Source: "default/vm0", Token: "tok"})
	prog := enc(t, kubeapi.MigrationProgress{Token: "tok", TotalBytes: 100, RemainingBytes: 50})
	oldProg := enc(t, kubeapi.MigrationProgress{Token: "tok-old", TotalBytes: 100, RemainingBytes: 50})
	ok := enc(t, kubeapi.MigrationResult{Token: "tok", Phase: kubeapi.MigrationSucceeded})
	failed := enc(t, kubeapi.MigrationResult{Token: "tok", Phase: kubeapi.MigrationFailed, Message: "boom"})
	oldFailed := enc(t, kubeapi.MigrationResult{Token: "tok-old", Phase: kubeapi.MigrationFailed, Message: "old"})
	refused := enc(t, kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: "no"})
	finished := enc(t, kubeapi.MigrationFinish{Token: "tok", Phase: kubeapi.MigrationSucceeded, DowntimeMS: 80})
	oldFinished := enc(t, kubeapi.MigrationFinish{Token: "tok-old", Phase: kubeapi.MigrationSucceeded})
	unfinished := enc(t, kubeapi.MigrationFinish{Token: "tok", Phase: kubeapi.MigrationFailed, Message: "no network"})

	type want struct {
		toS, toT map[string]string
		token    string
		moved    bool
		progress string
		finish   bool
		failure  string // a part of it

		sourceFailed string
		finishFailed bool
	}
	cases := []struct {
		name   string
		st     relayState
		sa, ta map[string]string
		mutate func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod)
		want   want
	}{
		{name: "nothing yet", want: want{}},
		{name: "source answered", sa: map[string]string{kubeapi.AnnotationMigrationSource: src},
			want: want{toT: map[string]string{kubeapi.AnnotationMigrationSource: src}}},
		{name: "source answered, relayed already", sa: map[string]string{kubeapi.AnnotationMigrationSource: src},
			ta: map[string]string{kubeapi.AnnotationMigrationSource: src}, want: want{}},
		{name: "source answered an earlier attempt", sa: map[string]string{kubeapi.AnnotationMigrationSource: oldSrc}, want: want{}},
		{name: "target answered",
			sa:   map[string]string{kubeapi.AnnotationMigrationSource: src},
			ta:   map[string]string{kubeapi.AnnotationMigrationSource: src, kubeapi.AnnotationMigrationTarget: tgt},
			want: want{token: "tok", toS: map[string]string{kubeapi.AnnotationMigrationTarget: tgt}}},
		{name: "target answered another source", ta: map[string]string{kubeapi.AnnotationMigrationTarget: otherTgt}, want: want{}},
		{name: "progress", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationProgress: prog},
			ta: map[string]string{kubeapi.AnnotationMigrationTarget: tgt}, want: want{token: "tok", progress: prog}},
		{name: "an earlier attempt's progress and result", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt,
			kubeapi.AnnotationMigrationProgress: oldProg, kubeapi.AnnotationMigrationResult: oldFailed},
			ta: map[string]string{kubeapi.AnnotationMigrationTarget: tgt}, want: want{token: "tok"}},
		{name: "an earlier attempt's result, before the target answered", sa: map[string]string{kubeapi.AnnotationMigrationResult: oldFailed}, want: want{}},
		{name: "source sent", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: ok},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt},
			want: want{token: "tok", moved: true, toT: map[string]string{kubeapi.AnnotationMigrationResult: ok}}},
		{name: "source sent, then its pod ended", st: relayState{token: "tok", moved: true},
			ta:     map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: ok},
			mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) { return nil, t },
			want:   want{token: "tok", moved: true}},
		{name: "source failed: T's finish is waited for", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt},
			want: want{token: "tok", sourceFailed: "boom", toT: map[string]string{kubeapi.AnnotationMigrationResult: failed}}},
		{name: "source failed, target finished failed", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed, kubeapi.AnnotationMigrationFinish: unfinished},
			want: want{token: "tok", sourceFailed: "boom", finishFailed: true, failure: "the source could not send the VM: boom"}},
		{name: "source failed, yet the VM arrived", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed, kubeapi.AnnotationMigrationFinish: finished},
			want: want{token: "tok", sourceFailed: "boom", finish: true}},
		{name: "source failed, then T's container exited", sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed},
			ta: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: failed},
			mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) {
				t.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "MigrationFailed", ExitCode: 1}}
				return s, t
			},
			want: want{token: "tok", sourceFailed: "boom",
				failure: "the source could not send the VM: boom; then target pod vm1-mig-abcde container vm exited: MigrationFailed: exit code 1"}},
		{name: "source refused", sa: map[string]string{kubeapi.AnnotationMigrationResult: refused}, want: want{failure: "the source refused: no"}},
		{name: "target refused", sa: map[string]string{kubeapi.AnnotationMigrationSource: src},
			ta:   map[string]string{kubeapi.AnnotationMigrationSource: src, kubeapi.AnnotationMigrationResult: refused},
			want: want{failure: "the target refused: no"}},
		{name: "finished", st: relayState{token: "tok", moved: true}, sa: map[string]string{kubeapi.AnnotationMigrationTarget: tgt},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationResult: ok, kubeapi.AnnotationMigrationFinish: finished},
			want: want{token: "tok", moved: true, finish: true}},
		{name: "an earlier token's finish", ta: map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationFinish: oldFinished},
			want: want{token: "tok", toS: map[string]string{kubeapi.AnnotationMigrationTarget: tgt}}},
		{name: "finish failed", st: relayState{token: "tok", moved: true},
			ta:   map[string]string{kubeapi.AnnotationMigrationTarget: tgt, kubeapi.AnnotationMigrationFinish: unfinished},
			want: want{token: "tok", moved: true, toS: map[string]string{kubeapi.AnnotationMigrationTarget: tgt}, finishFailed: true, failure: "the target could not take the VM: no network"}},
		{name: "source deleted", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) { return nil, t },
			want: want{failure: "source pod vm1 was deleted"}},
		{name: "source replaced", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) { s.UID = "another"; return s, t },
			want: want{failure: "source pod vm1 was deleted"}},
		{name: "source ended", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) { s.Status.Phase = corev1.PodFailed; return s, t },
			want: want{failure: "source pod vm1 is Failed, no longer Running"}},
		{name: "source asked elsewhere", sa: map[string]string{kubeapi.AnnotationMigrateTo: "vm1-mig-other"},
			want: want{failure: "no longer says crimux.io/migrate-to: " + target}},
		{name: "target deleted", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) { return s, nil },
			want: want{failure: "target pod vm1-mig-abcde was deleted"}},
		{name: "target being deleted", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) {
			t.DeletionTimestamp = &metav1.Time{}
			return s, t
		}, want: want{failure: "target pod vm1-mig-abcde is being deleted"}},
		{name: "target cannot run", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) {
			t.Status.Phase = corev1.PodPending
			t.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CreateContainerError", Message: "live migration is off on this node"}}
			return s, t
		}, want: want{failure: "target pod vm1-mig-abcde cannot run container vm: CreateContainerError: live migration is off on this node"}},
		{name: "target pulling", mutate: func(s, t *corev1.Pod) (*corev1.Pod, *corev1.Pod) {
			t.Status.Phase = corev1.PodPending
			t.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}
			return s, t
		}, want: want{}},
		{name: "garbage", sa: map[string]string{kubeapi.AnnotationMigrationSource: "{"}, want: want{failure: "source pod vm1: annotations[crimux.io/migration-source]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, tp := pods(tc.sa, tc.ta)
			if tc.mutate != nil {
				s, tp = tc.mutate(s, tp)
			}
			got := testRelay.next(tc.st, s, tp)
			w := tc.want
			if w.toS == nil {
				w.toS = map[string]string{}
			}
			if w.toT == nil {
				w.toT = map[string]string{}
			}
			if !maps.Equal(got.toSource, w.toS) || !maps.Equal(got.toTarget, w.toT) {
				t.Errorf("copies to S %v, to T %v; want %v, %v", got.toSource, got.toTarget, w.toS, w.toT)
			}
			if got.state != (relayState{token: w.token, moved: w.moved, sourceFailed: w.sourceFailed}) {
				t.Errorf("state %+v, want token %q moved %v sourceFailed %q", got.state, w.token, w.moved, w.sourceFailed)
			}
			if got.finishFailed != w.finishFailed {
				t.Errorf("finishFailed %v, want %v", got.finishFailed, w.finishFailed)
			}
			if got.progress != w.progress {
				t.Errorf("progress %q, want %q", got.progress, w.progress)
			}
			if (got.finish != nil) != w.finish {
				t.Errorf("finish %+v, want %v", got.finish, w.finish)
			}
			if w.failure == "" && got.failure != "" || !strings.Contains(got.failure, w.failure) {
				t.Errorf("failure %q, want %q", got.failure, w.failure)
			}
		})
	}
}
