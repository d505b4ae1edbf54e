package criservice

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// TestPowerStateInContainerStatus: the container stays RUNNING whatever
// the power state; the reason and the verbose info show it.
func TestPowerStateInContainerStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		power      vmtypes.PowerState
		wantReason string
	}{
		{"", ""}, {vmtypes.PowerRunning, ""}, {vmtypes.PowerPaused, "Paused"}, {vmtypes.PowerShutdown, "Shutdown"}, {vmtypes.PowerHibernate, "Hibernated"},
	} {
		t.Run(string(tc.power), func(t *testing.T) {
			r, e := newService(t)
			c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, tc.power)
			c.Reason = ""
			_ = r.Store.PutContainer(c)
			resp, err := r.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1", Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			st := resp.GetStatus()
			if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Reason != tc.wantReason {
				t.Fatalf("status %s reason %q, want RUNNING reason %q", st.State, st.Reason, tc.wantReason)
			}
			if tc.wantReason != "" && !strings.Contains(st.Message, "VM API") {
				t.Fatalf("message %q does not say who chose the power state", st.Message)
			}
			wantPower := tc.power
			if wantPower == "" {
				wantPower = vmtypes.PowerRunning
			}
			if !strings.Contains(resp.Info["info"], `"powerState":"`+string(wantPower)+`"`) {
				t.Fatalf("verbose info %s lacks powerState %s", resp.Info["info"], wantPower)
			}
		})
	}
	t.Run("exited keeps its exit reason", func(t *testing.T) {
		r, e := newService(t)
		c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerShutdown)
		c.Reason = "Completed" // as the old putVM recorded it
		_ = r.Store.PutContainer(c)
		resp, err := r.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1"})
		if err != nil || resp.Status.Reason != "Completed" {
			t.Fatalf("status %+v, %v; want reason Completed", resp.GetStatus(), err)
		}
	})
}

// TestStatsOfPoweredOffVM: zeros, no error, and no cgroup read.
func TestStatsOfPoweredOffVM(t *testing.T) {
	for _, p := range []vmtypes.PowerState{vmtypes.PowerShutdown, vmtypes.PowerHibernate} {
		r, e := newService(t)
		e.Cgroups.Fail = errors.New("cgroup read for a VM without qemu")
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, p)
		resp, err := r.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: "c1"})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if resp.Stats.Cpu.UsageCoreNanoSeconds.Value != 0 || resp.Stats.Memory.WorkingSetBytes.Value != 0 {
			t.Fatalf("%s: stats %+v, want zeros", p, resp.Stats)
		}
	}
}

// TestContainerStats: a running VM's usage is its cgroup's; the list
// filters by ID (prefix), pod and labels, and leaves out VMs whose
// cgroup cannot be read.
func TestContainerStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e := newService(t)
	e.Cgroups.CPU, e.Cgroups.Memory = 7e9, 300<<20
	for _, id := range []string{"aa1", "aa2", "bb1"} {
		c := putVM(t, e, "sb-"+id, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		c.Config.Labels = map[string]string{"app": id[:2]}
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		if id != "bb1" {
			if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	putVM(t, e, "sb-cc1", "cc1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "aa1"})
	if err != nil || resp.Stats.Cpu.UsageCoreNanoSeconds.Value != 7e9 || resp.Stats.Memory.WorkingSetBytes.Value != 300<<20 ||
		resp.Stats.Memory.GetUsageBytes().GetValue() != 300<<20 || resp.Stats.Attributes.Id != "aa1" || resp.Stats.Attributes.Labels["app"] != "aa" {
		t.Fatalf("ContainerStats(aa1) = %+v, %v", resp.GetStats(), err)
	}
	if resp.Stats.WritableLayer.GetUsedBytes().GetValue() != 0 {
		t.Fatalf("writable layer of a VM without a disk: %v", resp.Stats.WritableLayer)
	}
	_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "bb1"})
	wantCode(t, "ContainerStats of a VM without cgroup", err, codes.Unknown, "stats of crimux-bb1")
	_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "nope"})
	wantCode(t, "ContainerStats(nope)", err, codes.NotFound, "nope")
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"all", nil, []string{"aa1", "aa2", "cc1"}},
		{"by ID", &runtimeapi.ContainerStatsFilter{Id: "aa2"}, []string{"aa2"}},
		{"by ID prefix", &runtimeapi.ContainerStatsFilter{Id: "aa"}, []string{"aa1", "aa2"}},
		{"by pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: "sb-aa1"}, []string{"aa1"}},
		{"by label", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "aa"}}, []string{"aa1", "aa2"}},
		{"none", &runtimeapi.ContainerStatsFilter{Id: "zz"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range l.Stats {
				got = append(got, st.Attributes.Id)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("ListContainerStats(%v) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

// TestPodSandboxStats: a pod's stats are its VM's; the list filters.
func TestPodSandboxStats(t *testing.T) {
	ctx := context.Background()
	s, e := newService(t)
	e.Cgroups.CPU, e.Cgroups.Memory = 5, 6
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
		t.Fatal(err)
	}
	e.PutPod(t, "sb2", func(sb *store.Sandbox) { sb.Config.Labels = map[string]string{"tier": "db"} })
	e.PutPod(t, "sb3", func(sb *store.Sandbox) { sb.ContainerID = "gone" })
	resp, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	lin := resp.Stats.GetLinux()
	if resp.Stats.Attributes.Id != "sb1" || lin.GetCpu().GetUsageCoreNanoSeconds().GetValue() != 5 ||
		lin.GetMemory().GetWorkingSetBytes().GetValue() != 6 || len(lin.Containers) != 1 || lin.Containers[0].Attributes.Id != "c1" {
		t.Fatalf("PodSandboxStats(sb1) = %+v", resp.Stats)
	}
	resp, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: "sb2"})
	if err != nil || resp.Stats.Linux.Cpu != nil || len(resp.Stats.Linux.Containers) != 0 {
		t.Fatalf("PodSandboxStats of a pod without VM = %+v, %v", resp.GetStats(), err)
	}
	_, err = s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: "nope"})
	wantCode(t, "PodSandboxStats(nope)", err, codes.NotFound, "nope")
	for _, tc := range []struct {
		filter *runtimeapi.PodSandboxStatsFilter
		want   string
	}{
		{nil, "sb1,sb2,sb3"},
		{&runtimeapi.PodSandboxStatsFilter{Id: "sb2"}, "sb2"},
		{&runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"tier": "db"}}, "sb2"},
		{&runtimeapi.PodSandboxStatsFilter{Id: "x"}, ""},
	} {
		l, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range l.Stats {
			got = append(got, st.Attributes.Id)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("ListPodSandboxStats(%v) = %v, want %s", tc.filter, got, tc.want)
		}
	}
}

// TestStatus: ready while libvirtd answers and the emulator exists; the
// reason says which is missing.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*Service, *coretest.Env)
		reason string
		words  string
	}{
		{"ready", func(*Service, *coretest.Env) {}, "", ""},
		{"libvirtd down", func(_ *Service, e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }, "LibvirtUnavailable", "refused"},
		{"libvirtd does not answer", func(_ *Service, e *coretest.Env) { e.Libvirt.Fail("Version", errUnavailable) }, "LibvirtUnavailable", "does not answer"},
		{"emulator missing", func(s *Service, _ *coretest.Env) { s.Opts.Emulator = "/nonexistent/crimux-qemu" }, "EmulatorMissing", "/nonexistent/crimux-qemu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			tc.break_(s, e)
			resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var ready *runtimeapi.RuntimeCondition
			for _, c := range resp.Status.Conditions {
				if c.Type == runtimeapi.RuntimeReady {
					ready = c
				}
			}
			if ready == nil || ready.Status != (tc.reason == "") || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.words) {
				t.Fatalf("RuntimeReady = %+v, want ready %v, reason %q saying %q", ready, tc.reason == "", tc.reason, tc.words)
			}
			if len(resp.RuntimeHandlers) != 1 || resp.RuntimeHandlers[0].Name != "vm" {
				t.Fatalf("handlers %v", resp.RuntimeHandlers)
			}
		})
	}
}

// TestRuntimeInfo: the calls that say what the runtime is and has.
func TestRuntimeInfo(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	v, err := s.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "crimux-vm" || v.RuntimeApiVersion != "v1" {
		t.Fatalf("Version = %v, %v", v, err)
	}
	if _, err := s.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{}); err != nil || len(m.Descriptors) != 0 {
		t.Fatalf("ListMetricDescriptors = %v, %v", m, err)
	}
	if m, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{}); err != nil || len(m.PodMetrics) != 0 {
		t.Fatalf("ListPodSandboxMetrics = %v, %v", m, err)
	}
}

// TestPodSandboxStatus: the pod from the store, its VM's status, and
// the verbose info with the network.
func TestPodSandboxStatus(t *testing.T) {
	ctx := context.Background()
	s, e := newService(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.PutPod(t, "down", func(sb *store.Sandbox) { sb.NetDown = true; sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })
	resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1", Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.Id != "sb1" || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || resp.Status.GetNetwork().GetIp() != "10.1.0.5" ||
		resp.Status.GetMetadata().GetName() != "sb1" || len(resp.ContainersStatuses) != 1 || resp.ContainersStatuses[0].Id != "c1" || resp.Timestamp == 0 {
		t.Fatalf("PodSandboxStatus = %+v", resp)
	}
	var info struct {
		Runtime     string `json:"runtime"`
		ContainerID string `json:"containerId"`
		Network     struct {
			NetNS, IP, GuestMAC string
			PrefixLen           int
			Down                bool
		} `json:"network"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("verbose info %q: %v", resp.Info["info"], err)
	}
	if info.Runtime != "vm" || info.ContainerID != "c1" || info.Network.IP != "10.1.0.5" || info.Network.PrefixLen != 24 ||
		info.Network.GuestMAC != "52:54:00:00:00:01" || info.Network.NetNS != "/run/test/netns/i_sb1" || info.Network.Down {
		t.Fatalf("verbose info %+v", info)
	}
	resp, err = s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "down", Verbose: true})
	if err != nil || !strings.Contains(resp.Info["info"], `"down":true`) || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("status of a stopped pod: %+v, %v", resp, err)
	}
	if resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"}); err != nil || resp.Info != nil {
		t.Fatalf("non-verbose status has info: %v, %v", resp.GetInfo(), err)
	}
	_, err = s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})
	wantCode(t, "PodSandboxStatus(nope)", err, codes.NotFound, "nope")
}

// TestListPodSandbox: filters by ID prefix, state and labels; pods
// being created or removed are not listed.
func TestListPodSandbox(t *testing.T) {
	s, e := newService(t)
	e.PutPod(t, "web1", func(sb *store.Sandbox) { sb.Config.Labels = map[string]string{"app": "web"} })
	e.PutPod(t, "web2", func(sb *store.Sandbox) {
		sb.Config.Labels = map[string]string{"app": "web"}
		sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	})
	e.PutPod(t, "db1", func(sb *store.Sandbox) { sb.Config.Labels = map[string]string{"app": "db"} })
	e.PutPod(t, "web3", func(sb *store.Sandbox) { sb.Creating = true })
	e.PutPod(t, "web4", func(sb *store.Sandbox) { sb.Removing = true })
	notReady := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   string
	}{
		{"all", nil, "db1,web1,web2"},
		{"by ID", &runtimeapi.PodSandboxFilter{Id: "web1"}, "web1"},
		{"by ID prefix", &runtimeapi.PodSandboxFilter{Id: "web"}, "web1,web2"},
		{"by state", &runtimeapi.PodSandboxFilter{State: notReady}, "web2"},
		{"by label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}, "web1,web2"},
		{"by label and state", &runtimeapi.PodSandboxFilter{State: notReady, LabelSelector: map[string]string{"app": "db"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := s.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range l.Items {
				got = append(got, it.Id)
				if it.RuntimeHandler != "vm" || it.Metadata.GetName() != it.Id {
					t.Errorf("item %+v", it)
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("ListPodSandbox(%v) = %v, want %s", tc.filter, got, tc.want)
			}
		})
	}
}

// TestListContainers: filters by state, pod and labels.
func TestListContainers(t *testing.T) {
	s, e := newService(t)
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	c.Config.Labels, c.ImageRef = map[string]string{"io.kubernetes.container.name": "vm"}, "sha256:ab"
	_ = e.R.Store.PutContainer(c)
	putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	for _, tc := range []struct {
		filter *runtimeapi.ContainerFilter
		want   string
	}{
		{nil, "c1,c2"},
		{&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}, "c2"},
		{&runtimeapi.ContainerFilter{PodSandboxId: "sb1"}, "c1"},
		{&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "vm"}}, "c1"},
		{&runtimeapi.ContainerFilter{Id: "c3"}, ""},
	} {
		l, err := s.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range l.Containers {
			got = append(got, it.Id)
			if it.Id == "c1" && (it.ImageRef != "sha256:ab" || it.PodSandboxId != "sb1" || it.State != runtimeapi.ContainerState_CONTAINER_RUNNING) {
				t.Errorf("item %+v", it)
			}
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("ListContainers(%v) = %v, want %s", tc.filter, got, tc.want)
		}
	}
}
