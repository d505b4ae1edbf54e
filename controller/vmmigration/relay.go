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
	out := step{state: st, toSource: map[string]string{}, toTarget: map[string]string{}}
	fail := func(format string, args ...any) step {
		out.failure = fmt.Sprintf(format, args...)
		if why := out.state.sourceFailed; why != "" {
			out.failure = "the source could not send the VM: " + why + "; then " + out.failure
		}
		return out
	}
	// Each pod's annotations; nil if the pod is gone (or another has its
	// name).
	var sa, ta map[string]string
	if s != nil && s.UID == r.sourceUID {
		sa = annotationsOf(s)
	}
	if t != nil && t.UID == r.targetUID {
		ta = annotationsOf(t)
	}
	// copyTo copies value to the pod whose annotations are toAnn, unless
	// it has it, or is gone.
	copyTo := func(to map[string]string, toAnn map[string]string, key, value string) {
		if cur, ok := toAnn[key]; toAnn != nil && (!ok || cur != value) {
			to[key] = value
		}
	}

	// 2-3. S's answer to migrate-to: its VM, for T.
	var src kubeapi.MigrationSource
	if ok, err := kubeapi.DecodeAnnotation(sa, kubeapi.AnnotationMigrationSource, &src); err != nil {
		return fail("source pod %s: %v", r.source, err)
	} else if ok && src.Target == r.target {
		out.sourceReady = &src
		copyTo(out.toTarget, ta, kubeapi.AnnotationMigrationSource, sa[kubeapi.AnnotationMigrationSource])
	}
	// 4-5. T's answer to it: where the VM goes, for S.
	var tgt kubeapi.MigrationTarget
	if ok, err := kubeapi.DecodeAnnotation(ta, kubeapi.AnnotationMigrationTarget, &tgt); err != nil {
		return fail("target pod %s: %v", r.target, err)
	} else if ok && tgt.Source == r.ns+"/"+r.source && tgt.Token != "" {
		out.state.token = tgt.Token
		out.targetReady = &tgt
		copyTo(out.toSource, sa, kubeapi.AnnotationMigrationTarget, ta[kubeapi.AnnotationMigrationTarget])
	}
	token := out.state.token
	// 6-7. S's Migrate: its progress, then its result, for T.
	var prog kubeapi.MigrationProgress
	if ok, err := kubeapi.DecodeAnnotation(sa, kubeapi.AnnotationMigrationProgress, &prog); err != nil {
		return fail("source pod %s: %v", r.source, err)
	} else if ok && token != "" && prog.Token == token {
		out.progress, out.prog = sa[kubeapi.AnnotationMigrationProgress], prog
	}
	var sres kubeapi.MigrationResult
	ok, err := kubeapi.DecodeAnnotation(sa, kubeapi.AnnotationMigrationResult, &sres)
	switch {
	case err != nil:
		return fail("source pod %s: %v", r.source, err)
	case ok && token != "" && sres.Token == token:
		// Copied either way: T's agent finishes with it.
		copyTo(out.toTarget, ta, kubeapi.AnnotationMigrationResult, sa[kubeapi.AnnotationMigrationResult])
		if sres.Phase == kubeapi.MigrationSucceeded {
			out.state.moved = true
		} else {
			out.state.sourceFailed = orUnsaid(sres.Message)
		}
	case ok && sres.Token == "" && sres.Phase == kubeapi.MigrationFailed:
		return fail("the source refused: %s", orUnsaid(sres.Message))
	}
	// 4. T's refusal to prepare (its result without a token; with one it
	// is S's, copied).
	var tres kubeapi.MigrationResult
	if ok, err := kubeapi.DecodeAnnotation(ta, kubeapi.AnnotationMigrationResult, &tres); err != nil {
		return fail("target pod %s: %v", r.target, err)
	} else if ok && tres.Token == "" && tres.Phase == kubeapi.MigrationFailed {
		return fail("the target refused: %s", orUnsaid(tres.Message))
	}
	// 8. T's finish.
	var fin kubeapi.MigrationFinish
	if ok, err := kubeapi.DecodeAnnotation(ta, kubeapi.AnnotationMigrationFinish, &fin); err != nil {
		return fail("target pod %s: %v", r.target, err)
	} else if ok && (fin.Token == token && token != "" || fin.Token == "" && fin.Phase == kubeapi.MigrationFailed) {
		if fin.Phase == kubeapi.MigrationSucceeded {
			out.finish = &fin
			return out
		}
		out.finishFailed = true
		if why := out.state.sourceFailed; why != "" {
			out.failure = "the source could not send the VM: " + why
			return out
		}
		return fail("the target could not take the VM: %s", orUnsaid(fin.Message))
	}

	// The pods themselves.
	switch {
	case t == nil || t.UID != r.targetUID:
		return fail("target pod %s was deleted", r.target)
	case t.DeletionTimestamp != nil:
		return fail("target pod %s is being deleted", r.target)
	}
	if why := podTrouble(t); why != "" {
		return fail("target pod %s %s", r.target, why)
	}
	out.targetRunning = t.Status.Phase == corev1.PodRunning
	out.targetWaiting = waiting(t)
	if out.state.moved {
		// S's container exits once its VM left; only T matters now.
		return out
	}
	switch {
	case s == nil || s.UID != r.sourceUID:
		return fail("source pod %s was deleted", r.source)
	case s.DeletionTimestamp != nil:
		return fail("source pod %s is being deleted", r.source)
	case s.Status.Phase != corev1.PodRunning:
		return fail("source pod %s is %s, no longer Running", r.source, s.Status.Phase)
	case sa[kubeapi.AnnotationMigrateTo] != r.target:
		return fail("source pod %s no longer says %s: %s (another migration?)", r.source, kubeapi.AnnotationMigrateTo, r.target)
	}
	return out
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
