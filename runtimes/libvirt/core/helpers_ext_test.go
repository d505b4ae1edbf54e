package core_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

var (
	errUnavailable = fmt.Errorf("libvirtd: connection refused: %w", errdefs.ErrUnavailable)
	errBoom        = errors.New("boom")
)

// putVM records pod sbID with VM id in state and power, as coretest's
// PutPod and PutVM leave them.
func putVM(t *testing.T, e *coretest.Env, sbID, id string, state runtimeapi.ContainerState, power vmtypes.PowerState) *store.Container {
	t.Helper()
	e.PutPod(t, sbID, nil)
	return e.PutVM(t, sbID, id, state, power)
}

// record reads a live or dying container record; the test fails if there
// is none.
func record(t *testing.T, e *coretest.Env, id string) *store.Container {
	t.Helper()
	c := e.Record(t, id)
	if c == nil {
		t.Fatalf("no record of container %s", id)
	}
	return c
}

func domainState(t *testing.T, e *coretest.Env, name string) virt.State {
	t.Helper()
	d, ok := e.Libvirt.Domain(name)
	if !ok {
		t.Fatalf("no domain %s", name)
	}
	return d.State
}

func setDomainState(e *coretest.Env, name string, s virt.State) {
	e.Libvirt.Edit(name, func(d *virtfake.Domain) { d.State = s })
}

// events collects what the runtime publishes.
func events(t *testing.T, e *coretest.Env) func() []*runtimeapi.ContainerEventResponse {
	ch, cancel := e.R.Events.Subscribe()
	t.Cleanup(cancel)
	return func() []*runtimeapi.ContainerEventResponse {
		var out []*runtimeapi.ContainerEventResponse
		for {
			select {
			case ev := <-ch:
				out = append(out, ev)
			default:
				return out
			}
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// destroyFails is a libvirtd whose Destroy fails; off says whether the
// domain is off afterwards anyway (qemu died meanwhile).
type destroyFails struct {
	*virtfake.Libvirt
	off bool
}

func (d destroyFails) Destroy(dom virt.Domain) error {
	if d.off {
		d.Libvirt.Edit(dom.Name, func(x *virtfake.Domain) { x.State = virt.StateShutoff })
	}
	return errBoom
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

func fileContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}

func TestMain(m *testing.M) {
	coretest.TmpfsForTests()
	os.Exit(m.Run())
}
