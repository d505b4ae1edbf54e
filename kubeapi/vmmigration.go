package kubeapi

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// VMMigration is one live migration of a VM pod, a custom resource
// (deploy/crd-vmmigration.yaml) in the pod's namespace, in the spirit of
// KubeVirt's VirtualMachineInstanceMigration. crimux's controller
// (cmd/crimux-controller) carries it out: it makes the target pod, relays
// the node agents' answers between the two pods (the steps above), and
// deletes the source pod once the VM runs in the target, or the target
// pod if it failed. Its status is the whole state of the migration: a
// controller restarted at any step picks it up from there.
type VMMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VMMigrationSpec   `json:"spec"`
	Status            VMMigrationStatus `json:"status,omitempty"`
}

// The custom resource's names.
const (
	VMMigrationGroup    = "crimux.io"
	VMMigrationVersion  = "v1alpha1"
	VMMigrationKind     = "VMMigration"
	VMMigrationResource = "vmmigrations"
)

// VMMigrationSpec is what the user (or the drain) asks for.
type VMMigrationSpec struct {
	// Pod is the source pod's name, in the migration's namespace.
	Pod string `json:"pod"`
	// TargetNode binds the target pod to that node; empty: the scheduler
	// chooses one (never the source's node).
	TargetNode string `json:"targetNode,omitempty"`
	// Cancel asks the controller to stop the migration: the target pod
	// goes and the VM runs on in the source, unless it has left it
	// already (then the migration finishes).
	Cancel bool `json:"cancel,omitempty"`
}

// VMMigrationStatus is where the migration is.
type VMMigrationStatus struct {
	Phase      string `json:"phase,omitempty"`
	SourceNode string `json:"sourceNode,omitempty"`
	SourceUID  string `json:"sourceUID,omitempty"`
	TargetPod  string `json:"targetPod,omitempty"`
	TargetUID  string `json:"targetUID,omitempty"`
	TargetNode string `json:"targetNode,omitempty"`
	// Token is the target's migration token (its migration-target): the
	// agents' answers of this migration carry it.
	Token string `json:"token,omitempty"`
	// Moved: the source's node agent said the VM left it.
	Moved bool `json:"moved,omitempty"`
	// SourceFailed is the source's node agent's word that sending failed;
	// the target's has the last word (FinishMigration).
	SourceFailed   string       `json:"sourceFailed,omitempty"`
	SourceFailedAt *metav1.Time `json:"sourceFailedAt,omitempty"`
	// Progress is the last progress the source's node agent reported.
	Progress *MigrationProgress `json:"progress,omitempty"`
	// DowntimeMS is the guest's pause at the switch-over, as the target's
	// node agent measured it.
	DowntimeMS int64 `json:"downtimeMs,omitempty"`
	// Reason is a CamelCase word for why it ended as it did (or waits);
	// Message says it for a person.
	Reason     string             `json:"reason,omitempty"`
	Message    string             `json:"message,omitempty"`
	StartTime  *metav1.Time       `json:"startTime,omitempty"`
	EndTime    *metav1.Time       `json:"endTime,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The phases of a VMMigration, in order; Succeeded and Failed are final.
const (
	// VMMigrationPending: not started (waiting for a slot under the caps).
	VMMigrationPending = "Pending"
	// VMMigrationScheduling: the target pod is made, its VM not yet
	// waiting for the incoming state.
	VMMigrationScheduling = "Scheduling"
	// VMMigrationTargetReady: the target's VM waits for the state.
	VMMigrationTargetReady = "TargetReady"
	// VMMigrationRunning: the source streams the VM.
	VMMigrationRunning   = "Running"
	VMMigrationSucceeded = "Succeeded"
	VMMigrationFailed    = "Failed"
)

// Final says whether phase is one a migration ends in.
func Final(phase string) bool { return phase == VMMigrationSucceeded || phase == VMMigrationFailed }

// Labels and annotations of the controller's.
const (
	// LabelVMMigration, on a target pod: the VMMigration that made it.
	LabelVMMigration = "crimux.io/vmmigration"
	// AnnotationAvoidedNode, on a target pod the scheduler placed: the
	// source's node, which the controller's node affinity term keeps it
	// off; a later migration of it drops that term for its own.
	AnnotationAvoidedNode = "crimux.io/avoided-node"
	// AnnotationEviction, on a VM pod: what an eviction (a drain) does
	// to it. EvictionLiveMigrate: the eviction is refused (a
	// PodDisruptionBudget) while the controller moves the VM to another
	// node; the drain ends once the VM left. EvictionLiveMigrateOrShutdown:
	// the same, but a VM that cannot move is evicted (shut down) instead
	// of blocking the drain. Unset: the controller's default (--eviction).
	AnnotationEviction            = "crimux.io/eviction"
	EvictionLiveMigrate           = "live-migrate"
	EvictionLiveMigrateOrShutdown = "live-migrate-or-shutdown"
	EvictionShutdown              = "shutdown"
	// LabelEvictionPDB, on a VM pod the controller protects: the name of
	// its PodDisruptionBudget. A migration's target pod has its source's
	// labels, so the budget follows the VM from node to node.
	LabelEvictionPDB = "crimux.io/eviction-pdb"
	// AnnotationSharedVolumes, on a VM pod: the names of its volumes
	// (comma-separated) that are shared storage the same on every node,
	// though Kubernetes calls them node-local (a hostPath onto a cluster
	// filesystem): they do not keep the VM from moving.
	AnnotationSharedVolumes = "crimux.io/shared-volumes"
)

// DeepCopy is a copy of m sharing nothing with it.
func (m *VMMigration) DeepCopy() *VMMigration {
	out := *m
	m.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	st := &out.Status
	for _, t := range []**metav1.Time{&st.SourceFailedAt, &st.StartTime, &st.EndTime} {
		if *t != nil {
			c := (*t).DeepCopy()
			*t = c
		}
	}
	if st.Progress != nil {
		p := *st.Progress
		st.Progress = &p
	}
	if st.Conditions != nil {
		st.Conditions = make([]metav1.Condition, len(m.Status.Conditions))
		for i := range m.Status.Conditions {
			m.Status.Conditions[i].DeepCopyInto(&st.Conditions[i])
		}
	}
	return &out
}
