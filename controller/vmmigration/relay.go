package vmmigration

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/kubeapi"
)

// relay is one migration as the plugin carries it: S, the source pod,
// and T, the target pod, in one namespace.
type relay struct {
	ns, source, target   string
	sourceUID, targetUID types.UID
	node                 string // T's node
}

// relayState is what a migration has learnt so far.
type relayState struct {
	// token is T's migration token, from its migration-target: the
	// answers of this migration carry it.
	token string
	// moved: S's agent reported its Migrate succeeded: the VM left S, so
	// T is kept unless its agent says the VM did not arrive.
	moved bool
	// sourceFailed is S's agent's word that its Migrate failed. T's agent
	// has the last word (FinishMigration: a VM that switched over all
	// the same runs in T, and T is kept); its finish is waited for.
	sourceFailed string
}

// step is what to do on the pods as last seen: the annotations to copy
// to each (those it has not already, with that value), what to tell the
// user, and whether the migration is over.
type step struct {
	state              relayState
	toSource, toTarget map[string]string

	sourceReady   *kubeapi.MigrationSource  // S's answer to this migrate-to
	targetReady   *kubeapi.MigrationTarget  // T's answer to S's
	progress      string                    // S's migration-progress of this token, as written
	prog          kubeapi.MigrationProgress // ... and as it reads
	targetRunning bool
	targetWaiting string // why T's container does not run yet, if it says

	finish       *kubeapi.MigrationFinish // T's finish: the VM runs in T
	failure      string                   // why the migration failed
	finishFailed bool                     // T's finish says the VM did not arrive
}

// next is the step from the pods as last seen (nil: gone) and what was
// learnt before; it only reads them. Each answer is taken only if it
// names this migration (the target pod, the source pod, the token), so
// one left by an earlier attempt is never taken for this one's.
func (r relay) next(st relayState, s, t *corev1.Pod) step {
	x := &reading{r: r, out: step{state: st, toSource: map[string]string{}, toTarget: map[string]string{}}}
	// Each pod's annotations; nil if the pod is gone (or another has its
	// name).
	if s != nil && s.UID == r.sourceUID {
		x.sa = annotationsOf(s)
	}
	if t != nil && t.UID == r.targetUID {
		x.ta = annotationsOf(t)
	}
	for _, read := range []func() bool{x.sourceAnswer, x.targetAnswer, x.sourceProgress, x.sourceResult, x.targetRefusal, x.targetFinish} {
		if done := read(); done {
			return x.out
		}
	}
	x.pods(s, t)
	return x.out
}

// reading is one next: the step it makes and the pods' annotations.
// Each of its reads says whether the step is made (a failure, or T's
// finish).
type reading struct {
	r      relay
	out    step
	sa, ta map[string]string
}

// fail makes the step a failure (after S's own, if it said so).
func (x *reading) fail(format string, args ...any) bool {
	x.out.failure = fmt.Sprintf(format, args...)
	if why := x.out.state.sourceFailed; why != "" {
		x.out.failure = "the source could not send the VM: " + why + "; then " + x.out.failure
	}
	return true
}

// copyTo copies value to the pod whose annotations are toAnn, unless it
// has it, or is gone.
func copyTo(to map[string]string, toAnn map[string]string, key, value string) {
	if cur, ok := toAnn[key]; toAnn != nil && (!ok || cur != value) {
		to[key] = value
	}
}

// sourceAnswer is steps 2-3: S's answer to migrate-to, its VM, for T.
func (x *reading) sourceAnswer() bool {
	var src kubeapi.MigrationSource
	if ok, err := kubeapi.DecodeAnnotation(x.sa, kubeapi.AnnotationMigrationSource, &src); err != nil {
		return x.fail("source pod %s: %v", x.r.source, err)
	} else if ok && src.Target == x.r.target {
		x.out.sourceReady = &src
		copyTo(x.out.toTarget, x.ta, kubeapi.AnnotationMigrationSource, x.sa[kubeapi.AnnotationMigrationSource])
	}
	return false
}

// targetAnswer is steps 4-5: T's answer to it, where the VM goes, for S.
func (x *reading) targetAnswer() bool {
	var tgt kubeapi.MigrationTarget
	if ok, err := kubeapi.DecodeAnnotation(x.ta, kubeapi.AnnotationMigrationTarget, &tgt); err != nil {
		return x.fail("target pod %s: %v", x.r.target, err)
	} else if ok && tgt.Source == x.r.ns+"/"+x.r.source && tgt.Token != "" {
		x.out.state.token = tgt.Token
		x.out.targetReady = &tgt
		copyTo(x.out.toSource, x.sa, kubeapi.AnnotationMigrationTarget, x.ta[kubeapi.AnnotationMigrationTarget])
	}
	return false
}

// sourceProgress is step 6: S's Migrate's progress.
func (x *reading) sourceProgress() bool {
	var prog kubeapi.MigrationProgress
	if ok, err := kubeapi.DecodeAnnotation(x.sa, kubeapi.AnnotationMigrationProgress, &prog); err != nil {
		return x.fail("source pod %s: %v", x.r.source, err)
	} else if token := x.out.state.token; ok && token != "" && prog.Token == token {
		x.out.progress, x.out.prog = x.sa[kubeapi.AnnotationMigrationProgress], prog
	}
	return false
}

// sourceResult is steps 6-7: S's Migrate's result, for T; or S's
// refusal to describe its VM.
func (x *reading) sourceResult() bool {
	var sres kubeapi.MigrationResult
	ok, err := kubeapi.DecodeAnnotation(x.sa, kubeapi.AnnotationMigrationResult, &sres)
	token := x.out.state.token
	switch {
	case err != nil:
		return x.fail("source pod %s: %v", x.r.source, err)
	case ok && token != "" && sres.Token == token:
		// Copied either way: T's agent finishes with it.
		copyTo(x.out.toTarget, x.ta, kubeapi.AnnotationMigrationResult, x.sa[kubeapi.AnnotationMigrationResult])
		if sres.Phase == kubeapi.MigrationSucceeded {
			x.out.state.moved = true
		} else {
			x.out.state.sourceFailed = orUnsaid(sres.Message)
		}
	case ok && sres.Token == "" && sres.Phase == kubeapi.MigrationFailed:
		return x.fail("the source refused: %s", orUnsaid(sres.Message))
	}
	return false
}

// targetRefusal is step 4 refused: T's result without a token (with one
// it is S's, copied).
func (x *reading) targetRefusal() bool {
	var tres kubeapi.MigrationResult
	if ok, err := kubeapi.DecodeAnnotation(x.ta, kubeapi.AnnotationMigrationResult, &tres); err != nil {
		return x.fail("target pod %s: %v", x.r.target, err)
	} else if ok && tres.Token == "" && tres.Phase == kubeapi.MigrationFailed {
		return x.fail("the target refused: %s", orUnsaid(tres.Message))
	}
	return false
}

// targetFinish is step 8: T's finish.
func (x *reading) targetFinish() bool {
	var fin kubeapi.MigrationFinish
	token := x.out.state.token
	ok, err := kubeapi.DecodeAnnotation(x.ta, kubeapi.AnnotationMigrationFinish, &fin)
	switch {
	case err != nil:
		return x.fail("target pod %s: %v", x.r.target, err)
	case !ok || !(fin.Token == token && token != "" || fin.Token == "" && fin.Phase == kubeapi.MigrationFailed):
		return false
	case fin.Phase == kubeapi.MigrationSucceeded:
		x.out.finish = &fin
		return true
	}
	x.out.finishFailed = true
	if why := x.out.state.sourceFailed; why != "" {
		x.out.failure = "the source could not send the VM: " + why
		return true
	}
	return x.fail("the target could not take the VM: %s", orUnsaid(fin.Message))
}

// pods reads the pods themselves: T must be there and on its way, S too
// until its VM left.
func (x *reading) pods(s, t *corev1.Pod) {
	r := x.r
	switch {
	case t == nil || t.UID != r.targetUID:
		x.fail("target pod %s was deleted", r.target)
		return
	case t.DeletionTimestamp != nil:
		x.fail("target pod %s is being deleted", r.target)
		return
	}
	if why := podTrouble(t); why != "" {
		x.fail("target pod %s %s", r.target, why)
		return
	}
	x.out.targetRunning = t.Status.Phase == corev1.PodRunning
	x.out.targetWaiting = waiting(t)
	if x.out.state.moved {
		return // S's container exits once its VM left; only T matters now
	}
	switch {
	case s == nil || s.UID != r.sourceUID:
		x.fail("source pod %s was deleted", r.source)
	case s.DeletionTimestamp != nil:
		x.fail("source pod %s is being deleted", r.source)
	case s.Status.Phase != corev1.PodRunning:
		x.fail("source pod %s is %s, no longer Running", r.source, s.Status.Phase)
	case x.sa[kubeapi.AnnotationMigrateTo] != r.target:
		x.fail("source pod %s no longer says %s: %s (another migration?)", r.source, kubeapi.AnnotationMigrateTo, r.target)
	}
}

func annotationsOf(p *corev1.Pod) map[string]string {
	if p.Annotations == nil {
		return map[string]string{}
	}
	return p.Annotations
}

func orUnsaid(msg string) string {
	if msg == "" {
		return "(no reason given)"
	}
	return msg
}

// fatalWaiting are the reasons a container waits that it does not get
// over by waiting longer (kubelet retries; crimux refuses the same way).
var fatalWaiting = map[string]bool{
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
}

// podTrouble says why pod p will not run its VM ("" if nothing does):
// it ended, or a container of it exited or cannot be made.
func podTrouble(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		why := "is " + string(p.Status.Phase)
		if detail := join(p.Status.Reason, p.Status.Message); detail != "" {
			why += ": " + detail
		}
		if c := containerTrouble(p); c != "" {
			why += "; " + c
		}
		return why
	}
	return containerTrouble(p)
}

func containerTrouble(p *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch w, x := cs.State.Waiting, cs.State.Terminated; {
		case w != nil && fatalWaiting[w.Reason]:
			return fmt.Sprintf("cannot run container %s: %s", cs.Name, join(w.Reason, w.Message))
		case x != nil && !isInit(p, cs.Name):
			return fmt.Sprintf("container %s exited: %s", cs.Name, join(x.Reason, x.Message, fmt.Sprintf("exit code %d", x.ExitCode)))
		}
	}
	return ""
}

func isInit(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// waiting says why p's containers wait, as kubelet tells it.
func waiting(p *corev1.Pod) string {
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, fmt.Sprintf("container %s: %s", cs.Name, join(w.Reason, w.Message)))
		}
	}
	return strings.Join(parts, "; ")
}

func join(parts ...string) string {
	var nonEmpty []string
	for _, p := range parts {
		if p != "" {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return strings.Join(nonEmpty, ": ")
}
