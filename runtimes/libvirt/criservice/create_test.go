package criservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// TestCreateContainerRefusals: what CreateContainer refuses, with the
// field or the reason named, before anything is made.
func TestCreateContainerRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		pod   func(*store.Sandbox)                       // the pod "sb1" as recorded
		other []runtimeapi.ContainerState                // containers already in the pod
		edit  func(*runtimeapi.ContainerConfig, *string) // the request's config and pod ID
		code  codes.Code
		words string
	}{
		{name: "empty image", edit: func(c *runtimeapi.ContainerConfig, _ *string) { c.Image.Image = "" },
			code: codes.InvalidArgument, words: "config.image.image"},
		{name: "no image", edit: func(c *runtimeapi.ContainerConfig, _ *string) { c.Image = nil },
			code: codes.InvalidArgument, words: "config.image.image"},
		{name: "no memory limit", edit: func(c *runtimeapi.ContainerConfig, _ *string) { c.Linux.Resources.MemoryLimitInBytes = 0 },
			code: codes.InvalidArgument, words: "linux.resources.memory_limit_in_bytes"},
		{name: "no resources at all", edit: func(c *runtimeapi.ContainerConfig, _ *string) { c.Linux = nil },
			code: codes.InvalidArgument, words: "linux.resources.memory_limit_in_bytes"},
		{name: "memory below a VM's minimum", edit: func(c *runtimeapi.ContainerConfig, _ *string) { c.Linux.Resources.MemoryLimitInBytes = 16 << 20 },
			code: codes.InvalidArgument, words: "linux.resources.memory_limit_in_bytes"},
		{name: "too many vCPUs", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Linux.Resources.CpuQuota, c.Linux.Resources.CpuPeriod = 100*100000, 100000
		}, code: codes.InvalidArgument, words: "linux.resources.cpu_quota"},
		{name: "bad kernel args", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Annotations = map[string]string{vm.AnnotationKernelArgs: "console=ttyS0 \"unbalanced"}
		}, code: codes.InvalidArgument, words: vm.AnnotationKernelArgs},
		{name: "malformed user-data", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Annotations = map[string]string{cloudinit.AnnotationUserData: "#cloud-config\nusers: [unclosed\n"}
		}, code: codes.InvalidArgument, words: cloudinit.AnnotationUserData},
		{name: "user-data neither YAML nor a script", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Annotations = map[string]string{cloudinit.AnnotationUserData: "echo hi"}
		}, code: codes.InvalidArgument, words: cloudinit.AnnotationUserData},
		{name: "user-data over the limit", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Annotations = map[string]string{cloudinit.AnnotationUserData: "#!/bin/sh\n" + strings.Repeat("#", cloudinit.MaxUserData)}
		}, code: codes.InvalidArgument, words: cloudinit.AnnotationUserData},
		{name: "not an SSH key", edit: func(c *runtimeapi.ContainerConfig, _ *string) {
			c.Annotations = map[string]string{cloudinit.AnnotationSSHKeys: "ssh-ed25519 bm90IGEga2V5 me@host"}
		}, code: codes.InvalidArgument, words: cloudinit.AnnotationSSHKeys},
		{name: "log_path without log_directory", pod: func(sb *store.Sandbox) { sb.Config.LogDirectory = "" },
			code: codes.InvalidArgument, words: "config.log_path"},
		{name: "a second live container", other: []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING},
			code: codes.FailedPrecondition, words: `already has container "c0"`},
		{name: "a second created container", other: []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED},
			code: codes.FailedPrecondition, words: `already has container "c1"`},
		{name: "pod not ready", pod: func(sb *store.Sandbox) { sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY },
			code: codes.FailedPrecondition, words: "not ready"},
		{name: "pod being created", pod: func(sb *store.Sandbox) { sb.Creating = true },
			code: codes.NotFound, words: "sb1"},
		{name: "pod being removed", pod: func(sb *store.Sandbox) { sb.Removing = true },
			code: codes.NotFound, words: "sb1"},
		{name: "unknown pod", edit: func(_ *runtimeapi.ContainerConfig, sb *string) { *sb = "nope" },
			code: codes.NotFound, words: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			e.PutPod(t, "sb1", func(sb *store.Sandbox) {
				sb.Config.LogDirectory = t.TempDir()
				if tc.pod != nil {
					tc.pod(sb)
				}
			})
			for i, st := range tc.other {
				e.PutVM(t, "sb1", fmt.Sprintf("c%d", i), st, "")
			}
			domains, dirs := e.Libvirt.Names(), vmDirs(t, e)
			recs, _ := e.R.Store.Containers()
			cfg, sbID := vmConfig(256, 0, 0), "sb1"
			if tc.edit != nil {
				tc.edit(cfg, &sbID)
			}
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sbID, Config: cfg})
			wantCode(t, "CreateContainer", err, tc.code, tc.words)
			after, _ := e.R.Store.Containers()
			if len(after) != len(recs) || len(e.Libvirt.Names()) != len(domains) || len(vmDirs(t, e)) != len(dirs) {
				t.Fatalf("left behind: records %d→%d, domains %v→%v, dirs %v→%v", len(recs), len(after), domains, e.Libvirt.Names(), dirs, vmDirs(t, e))
			}
			if len(e.Images.Refs) != 0 {
				t.Fatalf("image read (%v) for a request refused before", e.Images.Refs)
			}
			if e.Libvirt.Calls("Define") != 0 {
				t.Fatal("a domain was defined for a refused request")
			}
		})
	}
}

// TestCreateContainerReplacesAnExitedVM: kubelet restarting the pod's
// container gets a new VM beside the exited one.
func TestCreateContainerReplacesAnExitedVM(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	old := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	startVM(t, s, old)
	if _, err := s.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: old, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if id == old {
		t.Fatal("same ID for the new VM")
	}
	if rec, _ := e.R.Store.Sandbox(sb); rec.ContainerID != id {
		t.Fatalf("pod names %q, want the new VM %q", rec.ContainerID, id)
	}
	if n := len(e.Libvirt.Names()); n != 2 {
		t.Fatalf("%d domains, want the exited VM's and the new one's", n)
	}
}

// TestCreateContainerKernelArgs: the pod's annotation, then the
// container's, replace the image's kernel command line.
func TestCreateContainerKernelArgs(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "web")
	cfg.Annotations = map[string]string{vm.AnnotationKernelArgs: "console=ttyS0 quiet"}
	sb := runPod(t, s, cfg)
	ccfg := vmConfig(128, 0, 0)
	ccfg.LogPath = ""
	id := createVM(t, s, sb, cfg, ccfg)
	d, _ := e.Libvirt.Domain(vm.DomainName(id))
	if !containsAll(d.XML, "console=ttyS0 quiet") {
		t.Fatalf("domain XML lacks the annotated kernel args:\n%s", d.XML)
	}
	if c := e.Record(t, id); c.LogPath != "" {
		t.Fatalf("log path %q without log_path", c.LogPath)
	}
}

// TestCreateContainerRollback: a step that fails undoes the ones before:
// no record, no VM dir, no domain.
func TestCreateContainerRollback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fail  func(*coretest.Env)
		code  codes.Code
		words string
	}{
		{"define fails", func(e *coretest.Env) { e.Libvirt.Fail("Define", errUnavailable) }, codes.Unavailable, "define domain"},
		{"libvirtd down", func(e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }, codes.Unavailable, "refused"},
		{"image cannot be read", func(e *coretest.Env) {
			e.Images.Err = errors.New("image registry.example/vm:1: not a VM image: " + errdefs.ErrFailedPrecondition.Error())
		}, codes.Unknown, "not a VM image"},
		{"image not found", func(e *coretest.Env) { e.Images.Err = errdefs.ErrNotFound }, codes.NotFound, "not found"},
		{"overlay disk cannot be made", func(e *coretest.Env) {
			e.Images.Layout = core.ImageLayout{DiskPath: filepath.Join(e.Dir, "no-such-base.qcow2"), DiskFormat: "qcow2"}
		}, codes.Unknown, "create overlay disk"},
		{"VM dir cannot be made", func(e *coretest.Env) {
			if err := os.RemoveAll(filepath.Join(e.Dir, "vms")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.Dir, "vms"), nil, 0o600); err != nil { // a file where the dir should be
				t.Fatal(err)
			}
		}, codes.Unknown, "vms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			cfg := podConfig(t, "web")
			sb := runPod(t, s, cfg)
			tc.fail(e)
			_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(128, 0, 0)})
			wantCode(t, "CreateContainer", err, tc.code, tc.words)
			if recs, _ := e.R.Store.Containers(); len(recs) != 0 {
				t.Fatalf("records left: %+v", recs[0])
			}
			if n := e.Libvirt.Names(); len(n) != 0 {
				t.Fatalf("domains left: %v", n)
			}
			if ents, _ := os.ReadDir(filepath.Join(e.Dir, "vms")); len(ents) != 0 {
				t.Fatalf("VM dirs left: %v", ents)
			}
			if rec, _ := e.R.Store.Sandbox(sb); rec.ContainerID != "" {
				t.Fatalf("pod names container %q", rec.ContainerID)
			}
		})
	}
}

// TestCreateContainerWithADisk: an image with a disk gets a qcow2
// overlay on it in the pod's directory, root's alone.
func TestCreateContainerWithADisk(t *testing.T) {
	t.Parallel()
	s, e, base := newServiceWithBaseDisk(t)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:aaaa", DiskPath: base, DiskFormat: "qcow2", DiskVirtualSize: 1 << 20}
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	c := e.Record(t, id)
	disk := filepath.Join(vmfiles.PodDir(e.R.Opts.StateDir, sb), vmfiles.DiskFile)
	fi, err := os.Stat(disk)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("overlay: %v, %v; want it, 0600", fi, err)
	}
	d, _ := e.Libvirt.Domain(c.Domain)
	if !containsAll(d.XML, disk) {
		t.Fatalf("domain XML lacks the overlay %s", disk)
	}
	resp, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil || resp.Stats.GetWritableLayer().GetInodesUsed().GetValue() != 1 || resp.Stats.WritableLayer.GetFsId().GetMountpoint() != e.Dir {
		t.Fatalf("writable layer of a VM with a disk: %+v, %v", resp.GetStats().GetWritableLayer(), err)
	}
}

// TestPodRootDiskOutlivesItsContainer: the root disk is the pod's. A
// second container of the same image (kubelet's restart, attempt 1) boots
// the very same file, even once the first container is removed; a
// container of another image gets a new disk; RemovePodSandbox deletes
// it.
func TestPodRootDiskOutlivesItsContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e, base := newServiceWithBaseDisk(t)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:aaaa", DiskPath: base, DiskFormat: "qcow2", DiskVirtualSize: 1 << 20}
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	disk := filepath.Join(vmfiles.PodDir(e.R.Opts.StateDir, sb), vmfiles.DiskFile)
	first := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	startVM(t, s, first)
	appendFile(t, disk, "written by attempt 0")
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: first}); err != nil {
		t.Fatal(err)
	}
	second := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if !fileHas(disk, "written by attempt 0") {
		t.Fatal("attempt 1 got a new root disk; want the pod's")
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: first}); err != nil {
		t.Fatal(err)
	}
	if !fileHas(disk, "written by attempt 0") {
		t.Fatal("removing attempt 0 removed the pod's root disk")
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: second}); err != nil {
		t.Fatal(err)
	}
	e.Images.Layout.Digest = "sha256:bbbb" // the pod's image changed
	createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if fileHas(disk, "written by attempt 0") || !exists(disk) {
		t.Fatal("a container of another image should boot a new root disk")
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if exists(vmfiles.PodDir(e.R.Opts.StateDir, sb)) {
		t.Fatalf("%s left after RemovePodSandbox", vmfiles.PodDir(e.R.Opts.StateDir, sb))
	}
}

func newServiceWithBaseDisk(t *testing.T) (*Service, *coretest.Env, string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed")
	}
	s, e := newService(t)
	base := filepath.Join(t.TempDir(), "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "1M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	return s, e, base
}

// TestRunPodSandboxRefusals: what RunPodSandbox refuses, and that a pod
// whose network cannot be made is not left behind.
func TestRunPodSandboxRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		edit  func(*runtimeapi.PodSandboxConfig)
		fail  func(*coretest.Env)
		code  codes.Code
		words string
	}{
		{name: "host network", edit: func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
		}, code: codes.InvalidArgument, words: "config.linux.security_context.namespace_options.network"},
		{name: "no name", edit: func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "" }, code: codes.InvalidArgument, words: "config.metadata"},
		{name: "no uid", edit: func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Uid = "" }, code: codes.InvalidArgument, words: "config.metadata"},
		// Found trying the README as a new user: such a pod got as far as
		// StartContainer, which failed with Unknown.
		{name: "no cgroup parent", edit: func(c *runtimeapi.PodSandboxConfig) { c.Linux.CgroupParent = "" }, code: codes.InvalidArgument, words: "config.linux.cgroup_parent"},
		{name: "no linux config", edit: func(c *runtimeapi.PodSandboxConfig) { c.Linux = nil }, code: codes.InvalidArgument, words: "config.linux.cgroup_parent"},
		{name: "libvirtd down", fail: func(e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }, code: codes.Unavailable, words: "refused"},
		{name: "CNI ADD fails", fail: func(e *coretest.Env) { e.Net.FailSetup = errors.New("plugin bridge failed") }, code: codes.Unavailable, words: "plugin bridge failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			cfg := podConfig(t, "web")
			if tc.edit != nil {
				tc.edit(cfg)
			}
			if tc.fail != nil {
				tc.fail(e)
			}
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
			wantCode(t, "RunPodSandbox", err, tc.code, tc.words)
			if recs, _ := e.R.Store.Sandboxes(); len(recs) != 0 {
				t.Fatalf("pod record left: %+v", recs[0])
			}
		})
	}
	t.Run("CNI ADD and DEL fail: kept for the collector, unseen", func(t *testing.T) {
		s, e := newService(t)
		e.Net.FailSetup, e.Net.FailDel = errors.New("ADD failed"), errors.New("DEL failed")
		_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig(t, "web")})
		wantCode(t, "RunPodSandbox", err, codes.Unavailable, "ADD failed")
		recs, _ := e.R.Store.Sandboxes()
		if len(recs) != 1 || !recs[0].Removing {
			t.Fatalf("records %+v, want one, Removing", recs)
		}
		if l, _ := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); len(l.Items) != 0 {
			t.Fatalf("a failed pod is listed: %v", l.Items)
		}
	})
	t.Run("no pod network", func(t *testing.T) {
		s, e := newService(t, coretest.Options{NoNetwork: true})
		sb := runPod(t, s, podConfig(t, "web"))
		resp, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
		if err != nil || resp.Status.Network != nil || resp.Status.RuntimeHandler != "vm" {
			t.Fatalf("status of a pod without network: %+v, %v; want no network status", resp.GetStatus(), err)
		}
		if rec, _ := e.R.Store.Sandbox(sb); rec.Creating || rec.Net != nil {
			t.Fatalf("record %+v", rec)
		}
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

// defineThen is a libvirtd that runs then after each Define.
type defineThen struct {
	*virtfake.Libvirt
	then func()
}

func (d defineThen) Define(xml string) (virt.Domain, error) {
	dom, err := d.Libvirt.Define(xml)
	d.then()
	return dom, err
}

// TestCreateContainerUndoesTheDomain: when the VM cannot be recorded
// after its domain was defined, the domain and the dir go.
func TestCreateContainerUndoesTheDomain(t *testing.T) {
	s, e := newService(t)
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	s.Conn = spyConn{defineThen{e.Libvirt, func() { _ = e.R.Store.Close() }}} // the store fails from here on
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(128, 0, 0)})
	if err == nil {
		t.Fatal("CreateContainer succeeded without its record")
	}
	if n := e.Libvirt.Names(); len(n) != 0 {
		t.Fatalf("domains left: %v", n)
	}
	if d := vmDirs(t, e); len(d) != 0 {
		t.Fatalf("VM dirs left: %v", d)
	}
}

// TestSnapshotsFollowThePodDisk: the snapshots in a pod's root disk stay
// listed for its next VM: saved when the previous VM is removed first,
// taken from its domain while it is still defined; the current one stays
// current. A new disk (another image) starts with none.
func TestSnapshotsFollowThePodDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e, base := newServiceWithBaseDisk(t)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:aaaa", DiskPath: base, DiskFormat: "qcow2", DiskVirtualSize: 1 << 20}
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	snapshot := func(id, name string) {
		t.Helper()
		dom, err := e.Libvirt.Lookup(e.Record(t, id).Domain)
		if err == nil {
			_, err = e.Libvirt.CreateSnapshot(dom, "<domainsnapshot><name>"+name+"</name></domainsnapshot>")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	snapshots := func(id string) string {
		t.Helper()
		dom, err := e.Libvirt.Lookup(e.Record(t, id).Domain)
		if err != nil {
			t.Fatal(err)
		}
		list, _ := e.Libvirt.ListSnapshots(dom)
		var out []string
		for _, sn := range list {
			cur, _ := e.Libvirt.IsCurrentSnapshot(sn)
			out = append(out, sn.Name+map[bool]string{true: "*"}[cur])
		}
		return strings.Join(out, ",")
	}
	stop := func(id string) {
		t.Helper()
		if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	first := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	startVM(t, s, first)
	snapshot(first, "s1")
	stop(first)
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: first}); err != nil {
		t.Fatal(err)
	}
	second := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if got := snapshots(second); got != "s1*" {
		t.Fatalf("snapshots of attempt 1 (attempt 0 removed first): %q, want s1*", got)
	}
	startVM(t, s, second)
	snapshot(second, "s2")
	stop(second)
	third := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if got := snapshots(third); got != "s1,s2*" {
		t.Fatalf("snapshots of attempt 2 (attempt 1 still defined): %q, want s1,s2*", got)
	}
	for _, id := range []string{second, third} {
		if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	e.Images.Layout.Digest = "sha256:bbbb"
	fourth := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	if got := snapshots(fourth); got != "" {
		t.Fatalf("a new root disk came with snapshots %q", got)
	}
}
