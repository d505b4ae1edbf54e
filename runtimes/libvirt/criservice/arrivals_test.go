package criservice

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
)

// TestNoArrivalsRefusesTargets: a CRI face wired to no migration room
// refuses a migration target at CreateContainer, naming the annotation,
// as a node with migration off does; a VM pod without the annotation is
// made as ever.
func TestNoArrivalsRefusesTargets(t *testing.T) {
	s, _ := newService(t)
	s.Arrivals = nil
	cfg := podConfig(t, "web-moved")
	cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: "ns/web"}
	sb := runPod(t, s, cfg)
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(256, 0, 0), SandboxConfig: cfg})
	wantCode(t, "a target with no migration room", err, codes.FailedPrecondition, "annotations[crimux.io/migrate-from]")
	runningVM(t, s, "web")
}

// TestTargetStartRefusedWithMigrationOff: a target created while its
// node's migration endpoint ran is refused at StartContainer once there
// is none (it could wait for nothing), with or without a room wired.
func TestTargetStartRefusedWithMigrationOff(t *testing.T) {
	for _, wired := range []bool{true, false} {
		s, e := newService(t)
		e.R.Migration = startMigrationNode(t, writeMigrationPKI(t), nil)
		cfg := podConfig(t, "web-moved")
		cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: "ns/web"}
		id := createVM(t, s, runPod(t, s, cfg), cfg, vmConfig(256, 0, 0))
		e.R.Migration = nil
		if !wired {
			s.Arrivals = nil
		}
		_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "a target's start with migration off", err, codes.FailedPrecondition, "live migration is off")
		if st, _, _ := containerState(t, s, id); st != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("the refused target is %s, want still created", st)
		}
	}
}
