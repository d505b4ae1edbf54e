package nodeagent

import (
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// Event reasons.
const (
	ReasonPowerStateChanged = "PowerStateChanged"
	ReasonRebooted          = "Rebooted"
	ReasonSnapshotCreated   = "SnapshotCreated"
	ReasonSnapshotRestored  = "SnapshotRestored"
	ReasonSnapshotDeleted   = "SnapshotDeleted"

	ReasonInvalidPowerState    = "InvalidPowerState"
	ReasonPowerStateFailed     = "PowerStateFailed"
	ReasonRebootFailed         = "RebootFailed"
	ReasonSnapshotFailed       = "SnapshotFailed"
	ReasonRestoreFailed        = "RestoreFailed"
	ReasonSnapshotDeleteFailed = "SnapshotDeleteFailed"
	ReasonNotAVM               = "NotAVM"
)

// requestAnnotations are the annotations that make a pod the agent's
// business: a pod with none of them is never looked at further. The
// migration's two (set by kubectl crimux migrate) make a pod a source or
// a target (kubeapi/migration.go).
var requestAnnotations = []string{
	kubeapi.AnnotationPowerState, kubeapi.AnnotationRestoreRequest, kubeapi.AnnotationSnapshotDeleteRequest,
	kubeapi.AnnotationSnapshotRequest, kubeapi.AnnotationRebootRequest,
	kubeapi.AnnotationMigrateTo, kubeapi.AnnotationMigrateFrom,
}

// hasRequests reports whether a pod carries any request annotation.
func hasRequests(annotations map[string]string) bool {
	for _, k := range requestAnnotations {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// powerStates are the values of crimux.io/power-state and
// crimux.io/observed-power-state: the VM API's power states, spelt as
// vmtypes (and crimuxctl) spell them.
var powerStates = map[vmtypes.PowerState]vmv1.PowerState{
	vmtypes.PowerRunning:   vmv1.PowerState_POWER_STATE_RUNNING,
	vmtypes.PowerPaused:    vmv1.PowerState_POWER_STATE_PAUSED,
	vmtypes.PowerShutdown:  vmv1.PowerState_POWER_STATE_SHUTDOWN,
	vmtypes.PowerHibernate: vmv1.PowerState_POWER_STATE_HIBERNATE,
}

// parsePowerState reads a crimux.io/power-state value; case matters.
func parsePowerState(value string) (vmv1.PowerState, bool) {
	p, ok := powerStates[vmtypes.PowerState(value)]
	return p, ok
}

// powerStateName is the annotation spelling of a power state; "" for
// UNSPECIFIED (the VM does not run).
func powerStateName(p vmv1.PowerState) string {
	for name, v := range powerStates {
		if v == p {
			return string(name)
		}
	}
	return ""
}
