package vmstats

import (
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

const running = runtimeapi.ContainerState_CONTAINER_RUNNING

// boom is a libvirt failure of no particular class.
var boom = errors.New("libvirt: internal error: boom")

// env is a core on fakes with its meter.
type env struct {
	*coretest.Env
	meter *Meter
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := coretest.New(t)
	return &env{Env: e, meter: New(CoreOf(e.R))}
}
