package nodeagent

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// The target's steps: 4 (PrepareMigration, once its VM container waits)
// and 8 (FinishMigration, once S's result is copied to it).

// containerExited is the VM API's ContainerState of an exited container
// (vmapi.toVM: the CRI state's name).
var containerExited = runtimeapi.ContainerState_CONTAINER_EXITED.String()

// prepare is step 4: once the controller has copied S's migration-source
// (made for this pod) and the pod's VM container runs, waiting,
// PrepareMigration is called once: its answer is migration-target, or
// migration-result Failed with no token. Never twice for the pod: an
// answer on it, or in memory, means done. After a crimux restart a
// lost answer means preparing again; the VM API then refuses (the
// restarted crimux failed the prepared target), and that is reported.
// A container not running yet is waited for (the pass is retried with
// backoff); an exited one is asked all the same, so that the VM API
// says why it waits no more.
func (r *reconciler) prepare(ctx context.Context, p *pass, vm *vmv1.VM) error {
	from, _ := p.current(kubeapi.AnnotationMigrateFrom)
	var src kubeapi.MigrationSource
	if !p.decode(kubeapi.AnnotationMigrationSource, &src) || src.Target != p.pod.Name {
		return nil // not copied yet, or made for another target
	}
	m := r.migration(p.pod.UID)
	if m.prepared != nil && m.prepared.about == from {
		m.prepared.apply(p)
		return nil
	}
	if p.preparedFor(from) {
		return nil
	}
	if p.state == vmv1.PowerState_POWER_STATE_UNSPECIFIED && vm.GetContainerState() != containerExited {
		return nil
	}
	resp, err := r.vms.PrepareMigration(ctx, &vmv1.PrepareMigrationRequest{Vm: p.ref, Source: sourceMessage(src)})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	m.prepared = prepared(from, resp.GetTarget(), err)
	m.prepared.apply(p)
	p.log.Info("node agent: migration target prepared", "from", from, "err", err)
	return nil
}

// prepared is PrepareMigration's answer.
func prepared(from string, t *vmv1.MigrationTarget, err error) *answer {
	if err != nil {
		msg := fmt.Sprintf("PrepareMigration (for the VM of %s): %v", from, err)
		return &answer{about: from, key: kubeapi.AnnotationMigrationResult, value: kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: msg},
			ev: event{corev1.EventTypeWarning, ReasonMigrationFailed, msg}}
	}
	return &answer{about: from, key: kubeapi.AnnotationMigrationTarget,
		value: targetAnnotation(from, t),
		ev: event{corev1.EventTypeNormal, ReasonMigrationPrepared,
			fmt.Sprintf("ready to receive the VM of %s (at %s)", from, t.GetAddress())}}
}

// preparedFor: the pod has its answer to PrepareMigration for the VM of
// from: a migration-target for it, or its refusal (a result without a
// token).
func (p *pass) preparedFor(from string) bool {
	var tgt kubeapi.MigrationTarget
	var res kubeapi.MigrationResult
	return p.decode(kubeapi.AnnotationMigrationTarget, &tgt) && tgt.Source == from ||
		p.decode(kubeapi.AnnotationMigrationResult, &res) && res.Token == ""
}

// finish is step 8: once S's result for this pod's token is copied here,
// FinishMigration is called once per token: the VM arrived (Succeeded)
// or did not (told why, the target's container exits). Its answer is
// migration-finish; the controller then deletes S, or, on any failure, T.
func (r *reconciler) finish(ctx context.Context, p *pass) error {
	from, _ := p.current(kubeapi.AnnotationMigrateFrom)
	var tgt kubeapi.MigrationTarget
	var res kubeapi.MigrationResult
	if !p.decode(kubeapi.AnnotationMigrationTarget, &tgt) || tgt.Source != from || tgt.Token == "" ||
		!p.decode(kubeapi.AnnotationMigrationResult, &res) || res.Token != tgt.Token {
		return nil
	}
	m := r.migration(p.pod.UID)
	if m.finished != nil && m.finished.about == tgt.Token {
		m.finished.apply(p)
		return nil
	}
	var fin kubeapi.MigrationFinish
	if p.decode(kubeapi.AnnotationMigrationFinish, &fin) && fin.Token == tgt.Token {
		return nil
	}
	failed := ""
	if res.Phase != kubeapi.MigrationSucceeded {
		failed = "the source failed to send it: " + cmp.Or(res.Message, "it reported the migration "+res.Phase)
	}
	resp, err := r.vms.FinishMigration(ctx, &vmv1.FinishMigrationRequest{Vm: p.ref, Failed: failed})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fin = kubeapi.MigrationFinish{Token: tgt.Token, Phase: kubeapi.MigrationSucceeded, DowntimeMS: resp.GetDowntimeMs(),
		Addresses: resp.GetAddresses(), Note: resp.GetNote()}
	switch {
	case err != nil:
		msg := "FinishMigration: " + err.Error()
		if failed != "" {
			msg = failed + "; " + msg
		}
		fin = kubeapi.MigrationFinish{Token: tgt.Token, Phase: kubeapi.MigrationFailed, Message: msg}
	case failed == "":
	case r.runsHere(ctx, p):
		// FinishMigration records a VM that runs here as arrived, told
		// failed or not: it did arrive, and T must not be deleted.
		fin.Note = strings.TrimSuffix("the source reported the migration failed, but the VM arrived here; "+fin.Note, "; ")
	default:
		fin = kubeapi.MigrationFinish{Token: tgt.Token, Phase: kubeapi.MigrationFailed, Message: failed}
	}
	m.finished = finished(from, fin)
	m.finished.apply(p)
	p.log.Info("node agent: migration finished", "from", from, "phase", fin.Phase, "message", fin.Message)
	return nil
}

// runsHere: the pod's VM runs after FinishMigration was told the
// migration failed (had it not arrived, the container has exited).
func (r *reconciler) runsHere(ctx context.Context, p *pass) bool {
	resp, err := r.vms.GetVM(ctx, &vmv1.GetVMRequest{Vm: p.ref})
	return err == nil && resp.GetVm().GetPowerState() != vmv1.PowerState_POWER_STATE_UNSPECIFIED
}

// finished is FinishMigration's answer.
func finished(from string, fin kubeapi.MigrationFinish) *answer {
	a := &answer{about: fin.Token, key: kubeapi.AnnotationMigrationFinish, value: fin}
	if fin.Phase != kubeapi.MigrationSucceeded {
		a.ev = event{corev1.EventTypeWarning, ReasonMigrationFailed, fmt.Sprintf("the VM of %s did not arrive: %s", from, fin.Message)}
		return a
	}
	msg := fmt.Sprintf("the VM of %s arrived: downtime %d ms", from, fin.DowntimeMS)
	if len(fin.Addresses) > 0 {
		msg += ", addresses " + strings.Join(fin.Addresses, ", ")
	}
	if fin.Note != "" {
		msg += "; " + fin.Note
	}
	a.ev = event{corev1.EventTypeNormal, ReasonMigrationArrived, msg}
	return a
}
