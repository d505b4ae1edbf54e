package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/version"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// fakeVMService answers the VM API and keeps the last request, and how
// long its caller was to wait for the answer.
type fakeVMService struct {
	vmv1.UnimplementedVMServiceServer
	mu       sync.Mutex
	last     proto.Message
	deadline time.Duration // left of the last call's deadline as it came
}

func (f *fakeVMService) got(m proto.Message) { f.gotWithin(nil, m) }

func (f *fakeVMService) gotWithin(ctx context.Context, m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last, f.deadline = m, 0
	if ctx != nil {
		if dl, ok := ctx.Deadline(); ok {
			f.deadline = time.Until(dl)
		}
	}
}

func (f *fakeVMService) lastRequest() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeVMService) lastDeadline() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline
}

var testVM = &vmv1.VM{PodSandboxId: "vm--sb1", ContainerId: "vm--c1", Namespace: "default", Name: "db",
	PodState: "SANDBOX_READY", ContainerState: "CONTAINER_RUNNING", PowerState: vmv1.PowerState_POWER_STATE_PAUSED,
	Domain: "crimux-c1", DomainState: "paused", Accelerator: "tcg", Resources: &vmv1.Resources{Vcpus: 1, MemoryMib: 256},
	Snapshots: []*vmv1.Snapshot{{Name: "s1", VmState: "running", HasMemory: true, CreatedAt: 1796000000}}}

func (f *fakeVMService) ListVMs(ctx context.Context, r *vmv1.ListVMsRequest) (*vmv1.ListVMsResponse, error) {
	f.gotWithin(ctx, r)
	return &vmv1.ListVMsResponse{Vms: []*vmv1.VM{testVM}}, nil
}

func (f *fakeVMService) GetVM(_ context.Context, r *vmv1.GetVMRequest) (*vmv1.GetVMResponse, error) {
	f.got(r)
	if r.GetVm().GetId() == "vm--nope" {
		return nil, status.Error(codes.NotFound, `vm "vm--nope": no VM pod or VM container has ID "nope": not found`)
	}
	return &vmv1.GetVMResponse{Vm: testVM}, nil
}

func (f *fakeVMService) RebootVM(ctx context.Context, r *vmv1.RebootVMRequest) (*vmv1.RebootVMResponse, error) {
	f.gotWithin(ctx, r)
	return &vmv1.RebootVMResponse{Method: vmv1.RebootMethod_REBOOT_METHOD_SOFT}, nil
}

func (f *fakeVMService) SetPowerState(ctx context.Context, r *vmv1.SetPowerStateRequest) (*vmv1.SetPowerStateResponse, error) {
	f.gotWithin(ctx, r)
	return &vmv1.SetPowerStateResponse{Previous: vmv1.PowerState_POWER_STATE_RUNNING, State: r.State}, nil
}

func (f *fakeVMService) CreateSnapshot(ctx context.Context, r *vmv1.CreateSnapshotRequest) (*vmv1.CreateSnapshotResponse, error) {
	f.gotWithin(ctx, r)
	return &vmv1.CreateSnapshotResponse{Snapshot: &vmv1.Snapshot{Name: r.SnapshotName, VmState: "running", HasMemory: true}}, nil
}

func (f *fakeVMService) ListSnapshots(_ context.Context, r *vmv1.ListSnapshotsRequest) (*vmv1.ListSnapshotsResponse, error) {
	f.got(r)
	return &vmv1.ListSnapshotsResponse{Snapshots: testVM.Snapshots}, nil
}

func (f *fakeVMService) RestoreSnapshot(_ context.Context, r *vmv1.RestoreSnapshotRequest) (*vmv1.RestoreSnapshotResponse, error) {
	f.got(r)
	return &vmv1.RestoreSnapshotResponse{State: vmv1.PowerState_POWER_STATE_RUNNING}, nil
}

func (f *fakeVMService) DeleteSnapshot(_ context.Context, r *vmv1.DeleteSnapshotRequest) (*vmv1.DeleteSnapshotResponse, error) {
	f.got(r)
	return &vmv1.DeleteSnapshotResponse{}, nil
}

func serveFake(t *testing.T) (*fakeVMService, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crimuxctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeVMService{}
	g := grpc.NewServer()
	vmv1.RegisterVMServiceServer(g, f)
	runtimeapi.RegisterRuntimeServiceServer(g, fakeRuntime{})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return f, "unix://" + sock
}

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestRequests: each command sends the request its arguments say, flags
// before or after the positional arguments.
func TestRequests(t *testing.T) {
	f, ep := serveFake(t)
	for _, tc := range []struct {
		args []string
		want proto.Message
	}{
		{[]string{"vm", "get", "vm--c1"}, &vmv1.GetVMRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}}},
		{[]string{"vm", "get", "default/db"}, &vmv1.GetVMRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Pod{Pod: &vmv1.PodName{Namespace: "default", Name: "db"}}}}},
		{[]string{"vm", "reboot", "vm--c1", "--hard", "--grace-period", "5s"}, &vmv1.RebootVMRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, Hard: true, TimeoutSeconds: 5}},
		{[]string{"vm", "reboot", "--grace-period=7", "vm--c1"}, &vmv1.RebootVMRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, TimeoutSeconds: 7}},
		// --timeout is the command's deadline: the guest keeps its grace.
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "5m"}, &vmv1.RebootVMRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, TimeoutSeconds: 30}},
		{[]string{"vm", "power", "vm--c1", "Hibernate"}, &vmv1.SetPowerStateRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, State: vmv1.PowerState_POWER_STATE_HIBERNATE, TimeoutSeconds: 30}},
		{[]string{"vm", "power", "vm--c1", "shutdown", "--grace-period", "2m"}, &vmv1.SetPowerStateRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, State: vmv1.PowerState_POWER_STATE_SHUTDOWN, TimeoutSeconds: 120}},
		{[]string{"vm", "snapshot", "create", "vm--c1", "s2", "--description", "before"}, &vmv1.CreateSnapshotRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, SnapshotName: "s2", Description: "before"}},
		{[]string{"vm", "snapshot", "restore", "vm--c1", "s2"}, &vmv1.RestoreSnapshotRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, SnapshotName: "s2"}},
		{[]string{"vm", "snapshot", "delete", "vm--c1", "--", "s2"}, &vmv1.DeleteSnapshotRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: "vm--c1"}}, SnapshotName: "s2"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %s", code, errOut)
			}
			if !proto.Equal(f.lastRequest(), tc.want) {
				t.Fatalf("request %v, want %v", f.lastRequest(), tc.want)
			}
			if out == "" {
				t.Fatal("no output")
			}
		})
	}
}

// TestJSONOutput: -o json (before or after the command) is JSON with the
// .proto's field names.
func TestJSONOutput(t *testing.T) {
	_, ep := serveFake(t)
	for _, args := range [][]string{
		{"-o", "json", "vm", "list"},
		{"vm", "list", "-o", "json"},
		{"vm", "get", "vm--c1", "-o", "json"},
		{"vm", "snapshot", "list", "vm--c1", "-o", "json"},
		{"vm", "power", "vm--c1", "paused", "-o", "json"},
		{"vm", "reboot", "vm--c1", "-o", "json"},
		{"vm", "snapshot", "delete", "vm--c1", "s1", "-o", "json"},
	} {
		code, out, errOut := runCLI(append([]string{"--endpoint", ep}, args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: output is not JSON: %v\n%s", args, err, out)
		}
	}
	_, out, _ := runCLI("--endpoint", ep, "-o", "json", "vm", "list")
	var list struct {
		VMs []struct {
			ContainerID string `json:"container_id"`
			PowerState  string `json:"power_state"`
		} `json:"vms"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.VMs) != 1 ||
		list.VMs[0].ContainerID != "vm--c1" || list.VMs[0].PowerState != "POWER_STATE_PAUSED" {
		t.Fatalf("vm list JSON %s (%v)", out, err)
	}
}

// TestTableOutput: tables name what matters.
func TestTableOutput(t *testing.T) {
	_, ep := serveFake(t)
	_, out, _ := runCLI("--endpoint", ep, "vm", "list")
	for _, w := range []string{"POD", "POWER", "default/db", "vm--c1", "Paused", "256 MiB"} {
		if !strings.Contains(out, w) {
			t.Fatalf("vm list lacks %q:\n%s", w, out)
		}
	}
	_, out, _ = runCLI("--endpoint", ep, "vm", "get", "default/db")
	for _, w := range []string{"Power state:", "Paused", "crimux-c1 (paused)", "tcg", "s1"} {
		if !strings.Contains(out, w) {
			t.Fatalf("vm get lacks %q:\n%s", w, out)
		}
	}
}

// TestExitCodes: 0 done, 1 the call failed (code and message printed),
// 2 bad usage.
func TestExitCodes(t *testing.T) {
	_, ep := serveFake(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"vm", "get", "vm--nope"}, exitCall, `NotFound: vm "vm--nope"`},
		{[]string{"vm"}, exitUsage, "Usage: crimuxctl vm"},
		{[]string{"vm", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"vm", "get"}, exitUsage, "want 1 argument"},
		{[]string{"vm", "get", "a", "b"}, exitUsage, "want 1 argument"},
		{[]string{"vm", "get", "/db"}, exitUsage, "namespace/name"},
		{[]string{"vm", "power", "vm--c1", "asleep"}, exitUsage, `"asleep"`},
		{[]string{"vm", "power", "vm--c1", "unspecified"}, exitUsage, "want running"},
		{[]string{"vm", "reboot", "vm--c1", "--grace-period", "1500ms"}, exitUsage, `invalid value "1500ms" for flag -grace-period: want whole seconds`},
		{[]string{"vm", "reboot", "vm--c1", "--grace-period", "0"}, exitUsage, `invalid value "0" for flag -grace-period: want whole seconds, at least 1s`},
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "soon"}, exitUsage, `invalid value "soon" for flag -timeout: want a positive duration`},
		{[]string{"vm", "power", "vm--c1", "shutdown", "--timeout", "0s"}, exitUsage, `invalid value "0s" for flag -timeout: want a positive duration`},
		{[]string{"--timeout", "-5s", "vm", "list"}, exitUsage, `invalid value "-5s" for flag -timeout: want a positive duration`},
		{[]string{"vm", "list", "--timeout"}, exitUsage, "flag needs an argument: -timeout"},
		{[]string{"vm", "reboot", "vm--c1", "--bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"vm", "list", "-o", "xml"}, exitUsage, `-o "xml": want table, json or yaml`},
		{[]string{"vm", "snapshot"}, exitUsage, "Usage: crimuxctl vm snapshot"},
		{[]string{"frob"}, exitUsage, "unknown command"},
		{[]string{}, exitUsage, "Usage: crimuxctl"},
	} {
		code, _, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.stderr)
		}
	}
}

// TestHelp: every command's --help exits 0 on stdout and describes its
// real flags.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		words []string
	}{
		{[]string{"--help"}, []string{"-endpoint", "-o", "-timeout", "vm", "Exit codes", "--timeout is how long a command waits at most"}},
		{[]string{"--endpoint", "unix:///x", "--help"}, []string{"Usage: crimuxctl [flags]"}},
		{[]string{"-o", "json", "vm", "reboot", "vm--c1", "--help"}, []string{"-hard"}},
		{[]string{"vm", "--help"}, []string{"list", "get", "reboot", "power", "snapshot create", "namespace/name"}},
		{[]string{"vm", "list", "--help"}, []string{"-o", "-endpoint"}},
		{[]string{"vm", "get", "-h"}, []string{"VM", "-o"}},
		{[]string{"vm", "--help"}, []string{"--timeout (before or after the command) is how long the command waits", "--grace-period"}},
		{[]string{"vm", "reboot", "--help"}, []string{"-hard", "-grace-period seconds", "-timeout duration", "default --grace-period + 1m, at least 2m"}},
		{[]string{"vm", "power", "--help"}, []string{"running|paused|shutdown|hibernate", "-grace-period seconds", "-timeout duration"}},
		{[]string{"vm", "migrate", "--help"}, []string{"-to", "-timeout duration", "(default 30m)"}},
		{[]string{"vm", "list", "--help"}, []string{"-timeout duration", "(default 30s)"}},
		{[]string{"vm", "snapshot", "--help"}, []string{"create", "restore", "64 characters"}},
		{[]string{"vm", "snapshot", "create", "--help"}, []string{"-description"}},
		{[]string{"vm", "snapshot", "list", "--help"}, []string{"VM"}},
		{[]string{"vm", "snapshot", "restore", "--help"}, []string{"VM NAME"}},
		{[]string{"vm", "snapshot", "delete", "--help"}, []string{"VM NAME"}},
		{[]string{"version", "--help"}, []string{"-o"}},
	} {
		code, out, _ := runCLI(tc.args...)
		if code != exitOK {
			t.Errorf("%v: exit %d", tc.args, code)
		}
		for _, w := range tc.words {
			if !strings.Contains(out, w) {
				t.Errorf("%v: help lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}

// TestVersionWithoutDaemon: --version needs no daemon; version prints
// crimuxctl's own version before it asks the daemon, and then says the
// daemon did not answer (exit 1).
func TestVersionWithoutDaemon(t *testing.T) {
	none := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	code, out, errOut := runCLI("--endpoint", none, "--version")
	if code != exitOK || out != "crimuxctl "+version.Version+"\n" {
		t.Errorf("--version: exit %d, %q %q; want 0 and crimuxctl's version", code, out, errOut)
	}
	code, out, errOut = runCLI("--endpoint", none, "--timeout", "2s", "version")
	if code != exitCall || out != "Client: crimuxctl "+version.Version+"\n" || !strings.Contains(errOut, "server at "+none) {
		t.Errorf("version, no daemon: exit %d, %q %q; want %d, the client's version and the server's error", code, out, errOut, exitCall)
	}
}

// TestDeadlines: --timeout, before or after the command, is the command's
// deadline; unset, a command that waits on a guest waits its grace period
// and a minute more (at least two), others 30s.
func TestDeadlines(t *testing.T) {
	f, ep := serveFake(t)
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"vm", "list"}, 30 * time.Second},
		{[]string{"vm", "list", "--timeout", "7s"}, 7 * time.Second},
		{[]string{"--timeout", "9s", "vm", "list"}, 9 * time.Second},
		{[]string{"vm", "reboot", "vm--c1"}, 2 * time.Minute},
		{[]string{"vm", "reboot", "vm--c1", "--grace-period", "3m"}, 4 * time.Minute},
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "5m"}, 5 * time.Minute},
		{[]string{"--timeout", "45s", "vm", "reboot", "vm--c1", "--grace-period", "3m"}, 45 * time.Second},
		{[]string{"vm", "power", "vm--c1", "shutdown", "--grace-period", "90"}, 150 * time.Second},
		{[]string{"vm", "power", "vm--c1", "paused", "--timeout=20s"}, 20 * time.Second},
		{[]string{"vm", "snapshot", "create", "vm--c1", "s3"}, snapshotCall},
		{[]string{"vm", "snapshot", "create", "vm--c1", "s3", "--timeout", "1m"}, time.Minute},
	} {
		code, _, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if got := f.lastDeadline(); got > tc.want || got < tc.want-5*time.Second {
			t.Errorf("%v: deadline %s, want %s", tc.args, got, tc.want)
		}
	}
}

// TestDeadlineShorterThanGrace: a --timeout that may end the command
// before the guest's grace ends is a note on stderr, not an error.
func TestDeadlineShorterThanGrace(t *testing.T) {
	_, ep := serveFake(t)
	for _, tc := range []struct {
		args []string
		note bool
	}{
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "10s"}, true},
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "10s", "--hard"}, false},
		{[]string{"vm", "reboot", "vm--c1", "--timeout", "31s"}, false},
		{[]string{"vm", "power", "vm--c1", "shutdown", "--timeout", "30s"}, true},
		{[]string{"vm", "power", "vm--c1", "paused", "--timeout", "10s"}, false},
	} {
		code, _, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != exitOK || strings.Contains(errOut, "may give up first") != tc.note {
			t.Errorf("%v: exit %d, stderr %q; want 0, a note %v", tc.args, code, errOut, tc.note)
		}
	}
}
