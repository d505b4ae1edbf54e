package vmops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

const running = runtimeapi.ContainerState_CONTAINER_RUNNING

// boom is a libvirt failure of no particular class.
var boom = errors.New("libvirt: internal error: boom")

// env is a core on fakes with its VM operations.
type env struct {
	*coretest.Env
	ops *Ops
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := coretest.New(t)
	return &env{Env: e, ops: New(e.R)}
}

// vm records pod sb1 with VM c1 in state and power, its domain defined to
// match.
func (e *env) vm(t *testing.T, state runtimeapi.ContainerState, power vmtypes.PowerState) *store.Container {
	t.Helper()
	e.PutPod(t, "sb1", nil)
	return e.PutVM(t, "sb1", "c1", state, power)
}

// withDisk gives a VM the overlay disk snapshots need.
func withDisk(t *testing.T, c *store.Container) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.Dir, "disk.qcow2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// domain is the fake's domain of c.
func (e *env) domain(t *testing.T, c *store.Container) virtfake.Domain {
	t.Helper()
	d, ok := e.Libvirt.Domain(c.Domain)
	if !ok {
		t.Fatalf("domain %s is gone", c.Domain)
	}
	return d
}

// record is c's record as stored (whatever its intent).
func (e *env) record(t *testing.T, id string) *store.Container {
	t.Helper()
	c, err := e.R.Store.AnyContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// followReboots does what OnConnect does for reboots: subscribe to the
// connection's reboot events, follow them and wake the waiters, until
// the test ends.
func (e *env) followReboots(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Libvirt.RebootEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unfollow := e.R.Reboots.Follow(e.Libvirt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case name, ok := <-ch:
				if !ok {
					return
				}
				e.R.Reboots.Fire(name)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; unfollow() })
}

// wantCode fails unless err is of class code and its message holds words.
func wantCode(t *testing.T, err error, code codes.Code, words string) {
	t.Helper()
	if errdefs.Code(err) != code || !strings.Contains(err.Error(), words) {
		t.Fatalf("err %v (%s), want %s saying %q", err, errdefs.Code(err), code, words)
	}
}

// powerOf is the power state a fake domain is in.
func powerOf(d virtfake.Domain) vmtypes.PowerState {
	return core.PowerStateOf(core.DomainView{State: d.State, ManagedSave: d.ManagedSave})
}
