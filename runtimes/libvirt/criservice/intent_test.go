package criservice

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/vmtypes"
)

// TestIntentRecordsAreInvisible: a record being created or removed is
// gone for CRI: no status, not listed, no stats.
func TestIntentRecordsAreInvisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, intent := range []string{"Removing", "Creating"} {
		t.Run(intent, func(t *testing.T) {
			s, e := newService(t)
			c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
				t.Fatal(err)
			}
			putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			c.Removing, c.Creating = intent == "Removing", intent == "Creating"
			if err := e.R.Store.PutContainer(c); err != nil {
				t.Fatal(err)
			}
			_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "c1"})
			wantCode(t, "ContainerStatus", err, codes.NotFound, "c1")
			_, err = s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "c1"})
			wantCode(t, "ContainerStats", err, codes.NotFound, "c1")
			_, err = s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: "c1"})
			wantCode(t, "StartContainer", err, codes.NotFound, "c1")
			_, err = s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "c1", Linux: &runtimeapi.LinuxContainerResources{}})
			wantCode(t, "UpdateContainerResources", err, codes.NotFound, "c1")
			list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil || len(list.Containers) != 1 || list.Containers[0].Id != "c2" {
				t.Fatalf("ListContainers = %v, %v; want only c2", list, err)
			}
			stats, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			if err != nil || len(stats.Stats) != 0 {
				t.Fatalf("ListContainerStats = %v, %v; want nothing (c2 has no cgroup, c1 is %s)", stats, err, intent)
			}
			pod, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "sb1"})
			if err != nil || len(pod.ContainersStatuses) != 0 {
				t.Fatalf("PodSandboxStatus = %v, %v; want no container status", pod, err)
			}
		})
	}
}

// TestRemoveContainerWhoseTeardownFails: RemoveContainer succeeds; the
// record stays, Removing, with the domain and dir, for the collector.
func TestRemoveContainerWhoseTeardownFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(*coretest.Env)
	}{
		{"undefine fails", func(e *coretest.Env) { e.Libvirt.Fail("Undefine", errUnavailable) }},
		{"libvirtd down", func(e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }},
		{"cgroup removal fails", func(e *coretest.Env) { e.Cgroups.Fail = errBoom }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, e := newService(t)
			sb, id := runningVM(t, s, "web")
			tc.fail(e)
			if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
				t.Fatalf("RemoveContainer: %v, want success (the collector finishes)", err)
			}
			c := e.Record(t, id)
			if c == nil || !c.Removing {
				t.Fatalf("record %+v, want it kept, Removing", c)
			}
			if !exists(c.Dir) {
				t.Fatal("VM dir removed although the teardown failed")
			}
			_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			wantCode(t, "ContainerStatus", err, codes.NotFound, id)
			_, err = s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			wantCode(t, "second RemoveContainer", err, codes.NotFound, id)
			if rec, _ := e.R.Store.Sandbox(sb); rec.ContainerID != "" {
				t.Fatalf("pod still names the removed VM %q", rec.ContainerID)
			}
			// A new VM may take its place.
			e.Libvirt.SetDown(nil)
			e.Cgroups.Fail = nil
			cfg := podConfig(t, "web")
			createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
		})
	}
}
