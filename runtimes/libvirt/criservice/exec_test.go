package criservice

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// execAgent is a guest agent whose commands print their argv and exit 3.
func execAgent(cmd string) (string, error) {
	if strings.Contains(cmd, `"guest-exec-status"`) {
		return fmt.Sprintf(`{"return":{"exited":true,"exitcode":3,"out-data":%q}}`, base64.StdEncoding.EncodeToString([]byte("ran\n"))), nil
	}
	return `{"return":{"pid":7}}`, nil
}

// TestExecSync: ExecSync runs the command through the guest agent and
// returns its output and exit code; a guest without an agent, a VM its
// user powered off, a container not running, are refused at once naming
// why.
func TestExecSync(t *testing.T) {
	ctx := context.Background()
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	c := e.PutVM(t, "sb", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	req := &runtimeapi.ExecSyncRequest{ContainerId: "c1", Cmd: []string{"sh", "-c", "exit 3"}, Timeout: 5}

	_, err := s.ExecSync(ctx, req)
	if errdefs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "guest agent") {
		t.Fatalf("exec without an agent: %v, want FailedPrecondition naming the guest agent", err)
	}
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.Agent = execAgent })
	resp, err := s.ExecSync(ctx, req)
	if err != nil || resp.ExitCode != 3 || string(resp.Stdout) != "ran\n" {
		t.Fatalf("ExecSync = %+v, %v; want exit 3 and the output", resp, err)
	}

	e.PutVM(t, "sb", "off", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerShutdown)
	if _, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "off", Cmd: []string{"true"}}); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("exec in a VM shut down by its user: %v, want FailedPrecondition", err)
	}
	e.PutVM(t, "sb", "made", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	if _, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "made", Cmd: []string{"true"}}); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("exec in a VM not started: %v, want FailedPrecondition", err)
	}
	if _, err := s.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "ghost", Cmd: []string{"true"}}); !errdefs.IsNotFound(err) {
		t.Fatalf("exec in an unknown container: %v, want NotFound", err)
	}
}

// TestExecSyncTimesOut: a command outliving the request's timeout is
// DeadlineExceeded.
func TestExecSyncTimesOut(t *testing.T) {
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	c := e.PutVM(t, "sb", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		d.Agent = func(cmd string) (string, error) {
			if strings.Contains(cmd, "status") {
				return `{"return":{"exited":false}}`, nil
			}
			return `{"return":{"pid":1}}`, nil
		}
	})
	_, err := s.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: "c1", Cmd: []string{"sleep", "9"}, Timeout: 1})
	if errdefs.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a command outliving its timeout: %v, want DeadlineExceeded", err)
	}
}
