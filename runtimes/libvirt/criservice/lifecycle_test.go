package criservice

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// TestVMLifeCycle: a VM pod from RunPodSandbox to RemovePodSandbox
// through the fake libvirtd, with each way StopContainer can end.
func TestVMLifeCycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		ignoresACPI bool
		timeout     int64
		stopSignal  runtimeapi.Signal
		code        int32
		reason      string
		minTime     time.Duration
	}{
		{"ACPI shutdown", false, 30, 0, core.ExitClean, "Completed", 0},
		{"stop signal SIGTERM: ACPI shutdown", false, 30, runtimeapi.Signal_SIGNAL_SIGTERM, core.ExitClean, "Completed", 0},
		{"guest ignores ACPI: destroyed after the grace", true, 1, 0, core.ExitKilled, "Killed", time.Second},
		{"no timeout: destroyed at once", false, 0, 0, core.ExitKilled, "Killed", 0},
		{"stop signal SIGKILL: destroyed at once, no ACPI", false, 30, runtimeapi.Signal_SIGNAL_SIGKILL, core.ExitKilled, "Killed", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, e := newService(t)
			cfg := podConfig(t, "web")
			sb := runPod(t, s, cfg)
			if len(e.Net.Setups) != 1 || e.Net.Setups[0] != sb {
				t.Fatalf("pod network setups %v, want %s's", e.Net.Setups, sb)
			}

			ctrCfg := vmConfig(256, 150000, 100000)
			ctrCfg.StopSignal = tc.stopSignal
			id := createVM(t, s, sb, cfg, ctrCfg)
			c := e.Record(t, id)
			if c == nil || c.Creating || c.State != runtimeapi.ContainerState_CONTAINER_CREATED || c.VCPUs != 2 || c.MemoryMiB != 256 ||
				c.Domain != "crimux-"+id || c.LogPath != filepath.Join(cfg.LogDirectory, "vm/0.log") {
				t.Fatalf("record after create: %+v", c)
			}
			d, ok := e.Libvirt.Domain(c.Domain)
			if !ok || d.State != virt.StateShutoff {
				t.Fatalf("domain after create: %+v, %v; want defined, shut off", d, ok)
			}
			for _, want := range []string{"/images/vmlinuz", "console=ttyS0", "/usr/bin/true", "<instance>i</instance>", c.Dir + "/console.log", vmfiles.ConsoleSocket(c.Dir)} {
				if !strings.Contains(d.XML, want) {
					t.Errorf("domain XML lacks %q", want)
				}
			}
			// The VM dir is root's; only run/, where qemu binds the
			// console socket, is qemu's.
			fi, err := os.Stat(c.Dir)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o711 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Fatalf("VM dir: %v, %v; want root's, 0711", fi.Mode(), err)
			}
			run, err := os.Stat(filepath.Dir(vmfiles.ConsoleSocket(c.Dir)))
			if err != nil {
				t.Fatalf("qemu's run dir: %v", err)
			}
			if u, err := user.Lookup(vmfiles.QemuUser); err == nil {
				if uid, _ := strconv.Atoi(u.Uid); int(run.Sys().(*syscall.Stat_t).Uid) != uid {
					t.Errorf("run dir owned by %d, want %s's %s", run.Sys().(*syscall.Stat_t).Uid, vmfiles.QemuUser, u.Uid)
				}
			}
			if sbRec, _ := e.R.Store.Sandbox(sb); sbRec.ContainerID != id {
				t.Fatalf("pod names container %q, want %q", sbRec.ContainerID, id)
			}
			if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 {
				t.Fatalf("status after create: %+v", st)
			}

			startVM(t, s, id)
			if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
				t.Fatalf("status after start: %+v", st)
			}
			if s := domainState(t, e, c.Domain); s != virt.StateRunning {
				t.Fatalf("domain %s after start", s)
			}
			cg, ok := e.Cgroups.Get(c.Domain)
			want := core.VMCgroup{Parent: cfg.Linux.CgroupParent, Name: c.Domain, CPUQuota: 150000, CPUPeriod: 100000,
				MemoryLimit: (256 + 64) << 20}
			if !ok || cg != want {
				t.Fatalf("cgroup %+v, %v; want %+v", cg, ok, want)
			}
			// The serial console reaches the CRI log.
			if err := os.WriteFile(filepath.Join(c.Dir, "console.log"), []byte("Booting Linux\r\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			coretest.WaitFor(t, "the console in the CRI log", func() bool {
				b, _ := os.ReadFile(c.LogPath)
				return strings.HasSuffix(string(b), " stdout F Booting Linux\n")
			})

			if tc.ignoresACPI {
				e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = true })
			}
			start := time.Now()
			if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: tc.timeout}); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < tc.minTime || took > tc.minTime+5*time.Second {
				t.Fatalf("stop took %s, want about %s", took, tc.minTime)
			}
			st := status(t, s, id)
			if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != tc.code || st.Reason != tc.reason || st.FinishedAt == 0 {
				t.Fatalf("status after stop: %s exit %d %q", st.State, st.ExitCode, st.Reason)
			}
			if s := domainState(t, e, c.Domain); s != virt.StateShutoff {
				t.Fatalf("domain %s after stop", s)
			}
			if n, press := e.Libvirt.Calls("Shutdown"), tc.timeout > 0 && tc.stopSignal != runtimeapi.Signal_SIGNAL_SIGKILL; press != (n == 1) {
				t.Fatalf("%d ACPI presses with a timeout of %ds and stop signal %s", n, tc.timeout, tc.stopSignal)
			}
			// Stopping a stopped VM succeeds and changes nothing.
			if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
				t.Fatal(err)
			}
			if st2 := status(t, s, id); st2.FinishedAt != st.FinishedAt || st2.Reason != st.Reason {
				t.Fatal("a second stop changed the exit")
			}

			if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.Libvirt.Domain(c.Domain); ok {
				t.Error("domain still defined after remove")
			}
			if exists(c.Dir) {
				t.Error("VM dir left after remove")
			}
			if _, ok := e.Cgroups.Get(c.Domain); ok {
				t.Error("cgroup left after remove")
			}
			if e.Record(t, id) != nil {
				t.Error("record left after remove")
			}
			if _, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); err == nil {
				t.Error("status of a removed container")
			}
			if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err == nil {
				t.Error("second RemoveContainer: want NotFound")
			}

			if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
				t.Fatal(err)
			}
			if len(e.Net.Teardowns) != 1 || e.Net.Teardowns[0] != sb {
				t.Fatalf("network teardowns %v, want %s's once", e.Net.Teardowns, sb)
			}
			if _, err := e.R.Store.Sandbox(sb); err == nil {
				t.Fatal("pod record left after RemovePodSandbox")
			}
		})
	}
}

// TestRemovePodSandboxWithItsVM: removing a pod whose VM runs removes
// the VM with it; stopping it first stops the VM at once.
func TestRemovePodSandboxWithItsVM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, stopFirst := range []bool{false, true} {
		t.Run("stop first "+strconv.FormatBool(stopFirst), func(t *testing.T) {
			s, e := newService(t)
			sb, id := runningVM(t, s, "web")
			e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.IgnoresACPI = true }) // no grace at pod stop
			if stopFirst {
				if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
					t.Fatal(err)
				}
				if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != "Killed" {
					t.Fatalf("VM after StopPodSandbox: %s %q", st.State, st.Reason)
				}
				resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
				if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
					t.Fatalf("pod after stop: %v, %v", resp, err)
				}
				if _, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(128, 0, 0)}); errCode(err) != codes.FailedPrecondition {
					t.Fatalf("CreateContainer in a stopped pod: %v, want FailedPrecondition", err)
				}
			}
			if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
				t.Fatal(err)
			}
			if e.Record(t, id) != nil || len(e.Libvirt.Names()) != 0 || len(vmDirs(t, e)) != 0 {
				t.Fatalf("left after RemovePodSandbox: record %v, domains %v, dirs %v", e.Record(t, id), e.Libvirt.Names(), vmDirs(t, e))
			}
			if _, err := e.R.Store.Sandbox(sb); err == nil {
				t.Fatal("pod record left")
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		s, _ := newService(t)
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "nope"}); errCode(err) != codes.NotFound {
			t.Fatalf("StopPodSandbox(nope): %v", err)
		}
		if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "nope"}); errCode(err) != codes.NotFound {
			t.Fatalf("RemovePodSandbox(nope): %v", err)
		}
	})
	t.Run("stop fails", func(t *testing.T) {
		s, e := newService(t)
		sb, id := runningVM(t, s, "web")
		e.Libvirt.Fail("Lookup", errUnavailable)
		if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); errCode(err) != codes.Unavailable {
			t.Fatalf("StopPodSandbox with libvirt failing: %v, want Unavailable", err)
		}
		if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("VM %s after a failed pod stop", st.State)
		}
	})
}

// TestStartContainer: what a start does when something is off.
func TestStartContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	created := func(t *testing.T) (*Service, *coretest.Env, string) {
		s, e := newService(t)
		cfg := podConfig(t, "web")
		sb := runPod(t, s, cfg)
		return s, e, createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	}
	t.Run("libvirt's start fails: cgroup removed, still created", func(t *testing.T) {
		s, e, id := created(t)
		e.Libvirt.Fail("Start", errUnavailable)
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "StartContainer", err, codes.Unavailable, "start domain crimux-"+id)
		if _, ok := e.Cgroups.Get("crimux-" + id); ok {
			t.Fatal("cgroup left after a failed start")
		}
		if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("state %s after a failed start, want CREATED", st.State)
		}
		startVM(t, s, id) // kubelet's retry works
		if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("state %s after the retry", st.State)
		}
	})
	t.Run("domain already running: recorded, not started again", func(t *testing.T) {
		s, e, id := created(t)
		e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.State = virt.StateRunning })
		startVM(t, s, id)
		if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("state %s, want RUNNING", st.State)
		}
		if n := e.Libvirt.Calls("Start"); n != 0 {
			t.Fatalf("%d starts of a running domain", n)
		}
		if _, ok := e.Cgroups.Get("crimux-" + id); !ok {
			t.Fatal("no cgroup for the running VM")
		}
	})
	t.Run("domain state unknown: start tried", func(t *testing.T) {
		s, e, id := created(t)
		e.Libvirt.Fail("State", errUnavailable)
		startVM(t, s, id)
		if n := e.Libvirt.Calls("Start"); n != 1 {
			t.Fatalf("%d starts, want 1", n)
		}
	})
	t.Run("domain gone", func(t *testing.T) {
		s, e, id := created(t)
		if err := e.Libvirt.Undefine(virt.Domain{Name: "crimux-" + id}); err != nil {
			t.Fatal(err)
		}
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "StartContainer without a domain", err, codes.NotFound, "crimux-"+id)
		if _, ok := e.Cgroups.Get("crimux-" + id); ok {
			t.Fatal("cgroup left after a failed start")
		}
	})
	t.Run("cgroup cannot be made", func(t *testing.T) {
		s, e, id := created(t)
		e.Cgroups.Fail = errBoom
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "StartContainer", err, codes.Unknown, "cgroup of crimux-"+id)
		if n := e.Libvirt.Calls("Start"); n != 0 {
			t.Fatalf("domain started without its cgroup")
		}
	})
	t.Run("libvirtd down", func(t *testing.T) {
		s, e, id := created(t)
		e.Libvirt.SetDown(errUnavailable)
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "StartContainer", err, codes.Unavailable, "refused")
	})
	t.Run("not created", func(t *testing.T) {
		s, _, id := created(t)
		startVM(t, s, id)
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		wantCode(t, "second StartContainer", err, codes.FailedPrecondition, "CONTAINER_RUNNING")
	})
	t.Run("unknown", func(t *testing.T) {
		s, _ := newService(t)
		_, err := s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: "nope"})
		wantCode(t, "StartContainer(nope)", err, codes.NotFound, "nope")
		_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "nope"})
		wantCode(t, "StopContainer(nope)", err, codes.NotFound, "nope")
		_, err = s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "nope"})
		wantCode(t, "RemoveContainer(nope)", err, codes.NotFound, "nope")
	})
}

// startSpy is a libvirtd whose Start runs during first.
type startSpy struct {
	*virtfake.Libvirt
	during func(virt.Domain)
}

func (s startSpy) StartIfOff(name string) (bool, error) {
	s.during(virt.Domain{Name: name})
	return s.Libvirt.StartIfOff(name)
}

type spyConn struct{ l virt.Libvirt }

func (c spyConn) Get() (virt.Libvirt, error) { return c.l, nil }

// TestStartContainerGrantsOnePlacement: the placement of the VM's new
// qemu is granted while its start runs, once, and not after.
func TestStartContainerGrantsOnePlacement(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	var granted, twice, other bool
	spy := spyConn{startSpy{e.Libvirt, func(d virt.Domain) {
		other = e.R.Starts.Take("crimux-someone-else")
		granted = e.R.Starts.Take(d.Name)
		twice = e.R.Starts.Take(d.Name)
	}}}
	s.Conn, e.R.Conn = spy, spy
	startVM(t, s, id)
	if !granted || twice || other {
		t.Fatalf("during the start: granted %v, twice %v, to another VM %v; want one grant, to this VM", granted, twice, other)
	}
	if e.R.Starts.Take("crimux-" + id) {
		t.Fatal("a placement granted after the start")
	}
}
