package nodeagent

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// VMService is the part of crimux's VM API the agent calls: the vmapi
// server, in-process. Called so, its errors are not gRPC statuses but
// internal/errdefs sentinels, wrapped (no interceptor translates them).
type VMService interface {
	GetVM(context.Context, *vmv1.GetVMRequest) (*vmv1.GetVMResponse, error)
	SetPowerState(context.Context, *vmv1.SetPowerStateRequest) (*vmv1.SetPowerStateResponse, error)
	RebootVM(context.Context, *vmv1.RebootVMRequest) (*vmv1.RebootVMResponse, error)
	CreateSnapshot(context.Context, *vmv1.CreateSnapshotRequest) (*vmv1.CreateSnapshotResponse, error)
	RestoreSnapshot(context.Context, *vmv1.RestoreSnapshotRequest) (*vmv1.RestoreSnapshotResponse, error)
	DeleteSnapshot(context.Context, *vmv1.DeleteSnapshotRequest) (*vmv1.DeleteSnapshotResponse, error)
	ListSnapshots(context.Context, *vmv1.ListSnapshotsRequest) (*vmv1.ListSnapshotsResponse, error)

	// Live migration (kubeapi/migration.go). MigrateFollowing is
	// Migrate in process: each progress handed to a function.
	GetMigrationSource(context.Context, *vmv1.GetMigrationSourceRequest) (*vmv1.GetMigrationSourceResponse, error)
	PrepareMigration(context.Context, *vmv1.PrepareMigrationRequest) (*vmv1.PrepareMigrationResponse, error)
	MigrateFollowing(context.Context, *vmv1.MigrateRequest, func(*vmv1.MigrateProgress)) error
	FinishMigration(context.Context, *vmv1.FinishMigrationRequest) (*vmv1.FinishMigrationResponse, error)
}

// vmRef names a pod's VM by the pod's namespace and name: the VM API
// resolves it to the pod's current (ready, else newest) sandbox.
func vmRef(pod *corev1.Pod) *vmv1.VMRef {
	return &vmv1.VMRef{Ref: &vmv1.VMRef_Pod{Pod: &vmv1.PodName{Namespace: pod.Namespace, Name: pod.Name}}}
}
