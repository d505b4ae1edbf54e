package vm

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func files(paths ...string) func(string) bool {
	return func(p string) bool {
		for _, f := range paths {
			if f == p {
				return true
			}
		}
		return false
	}
}

// TestStorageFrom: what of a container's devices and mounts reaches the
// guest, and how it is named there.
func TestStorageFrom(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		Devices: []*runtimeapi.Device{
			{ContainerPath: "/dev/xvdb", HostPath: "/dev/loop3", Permissions: "mrw"},
			{ContainerPath: "/dev/data-ro", HostPath: "/dev/loop4", Permissions: "r"},
		},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/data", HostPath: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/data"},
			{ContainerPath: "/etc/config/app", HostPath: "/cm", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
			{ContainerPath: "/etc/hosts", HostPath: "/pods/u/etc-hosts"},
			{ContainerPath: "/dev/termination-log", HostPath: "/pods/u/containers/vm/x"},
			{ContainerPath: "/var/run/secrets/kubernetes.io/serviceaccount", HostPath: "/token", Readonly: true},
			{ContainerPath: "/crimux/cloud-init", HostPath: "/secret", Readonly: true},
		},
	}
	st, err := StorageFrom(cfg, files("/pods/u/etc-hosts", "/pods/u/containers/vm/x"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Devices) != 2 || st.Devices[0].Serial != "dev-xvdb" || st.Devices[0].ReadOnly || !st.Devices[1].ReadOnly {
		t.Fatalf("devices: %+v", st.Devices)
	}
	if len(st.Shares) != 2 || st.Shares[0].Tag != "data" || st.Shares[1].Tag != "etc-config-app" || !st.Shares[1].ReadOnly || st.Shares[0].ReadOnly {
		t.Fatalf("shares: %+v", st.Shares)
	}
	if strings.Join(st.Skipped, " ") != "/etc/hosts /dev/termination-log /var/run/secrets/kubernetes.io/serviceaccount /crimux/cloud-init" {
		t.Fatalf("skipped: %v", st.Skipped)
	}
}

// TestStorageFromRefuses: each bad device or mount is InvalidArgument
// naming its field.
func TestStorageFromRefuses(t *testing.T) {
	many := &runtimeapi.ContainerConfig{}
	for i := 0; i <= MaxVolumes; i++ {
		many.Mounts = append(many.Mounts, &runtimeapi.Mount{ContainerPath: "/m" + strings.Repeat("x", i), HostPath: "/h"})
	}
	for _, tc := range []struct {
		name  string
		cfg   *runtimeapi.ContainerConfig
		field string
	}{
		{"relative device path", &runtimeapi.ContainerConfig{Devices: []*runtimeapi.Device{{ContainerPath: "/dev/b", HostPath: "loop0"}}}, "config.devices[0].host_path"},
		{"device permissions", &runtimeapi.ContainerConfig{Devices: []*runtimeapi.Device{{ContainerPath: "/dev/b", HostPath: "/dev/loop0", Permissions: "wx"}}}, "config.devices[0].permissions"},
		{"bidirectional mount", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}}, "config.mounts[0].propagation"},
		{"file mount", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/app/config.yaml", HostPath: "/f"}}}, "config.mounts[0].host_path"},
		{"comma in a host path", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h,cache=always"}}}, "config.mounts[0].host_path"},
		{"two paths, one tag", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/a/b", HostPath: "/h"}, {ContainerPath: "/a-b", HostPath: "/h"}}}, "config.mounts[1].container_path"},
		{"more volumes than slots", many, "config.devices"},
		{"uid mappings on a share", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/etc/hosts", HostPath: "/f"}, {ContainerPath: "/a", HostPath: "/h"},
			{ContainerPath: "/d", HostPath: "/h2", UidMappings: []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}}}}, "config.mounts[2].uidMappings"},
		{"gid mappings on a share", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h", GidMappings: []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}}}}, "config.mounts[0].gidMappings"},
		{"a user name for a share", &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/d", HostPath: "/h"}},
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"}}}, "config.linux.security_context.run_as_username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StorageFrom(tc.cfg, files("/f"))
			if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v; want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestDeriveName: tags and serials fit their limits and stay apart.
func TestDeriveName(t *testing.T) {
	for in, want := range map[string]string{"/data": "data", "/var/lib/app": "var-lib-app", "/a b/c:d": "a-b-c-d", "/": "root"} {
		if got := deriveName(in, MaxTagLen); got != want {
			t.Errorf("deriveName(%q) = %q, want %q", in, got, want)
		}
	}
	long1, long2 := deriveName("/very/long/path/to/some/volume/one", MaxSerialLen), deriveName("/very/long/path/to/some/volume/two", MaxSerialLen)
	if len(long1) != MaxSerialLen || long1 == long2 || !strings.HasPrefix(long1, "very-long-p") {
		t.Fatalf("long names: %q, %q", long1, long2)
	}
}

// TestStorageQemuArgs: block devices through fd sets, shares through
// their socket, each at its own slot below the NIC's.
func TestStorageQemuArgs(t *testing.T) {
	b := BlockDevice{Serial: "dev-xvdb", ReadOnly: true}.QemuArgs(0, "{fd1}")
	want := []string{"-add-fd", "fd={fd1},set=100",
		"-blockdev", "driver=host_device,node-name=crimux-blk0,filename=/dev/fdset/100,read-only=on,cache.direct=off,discard=unmap",
		"-device", "virtio-blk-pci,drive=crimux-blk0,id=crimux-blk0-dev,serial=dev-xvdb,bus=pci.0,addr=0x1d"}
	if strings.Join(b, " ") != strings.Join(want, " ") {
		t.Fatalf("block device args:\n%q\nwant\n%q", b, want)
	}
	s := Share{Tag: "data"}.QemuArgs(1, "{fd2}")
	want = []string{"-chardev", "socket,id=crimux-fs1,fd={fd2}",
		"-device", "vhost-user-fs-pci,chardev=crimux-fs1,id=crimux-fs1-dev,tag=data,queue-size=1024,bus=pci.0,addr=0x1c"}
	if strings.Join(s, " ") != strings.Join(want, " ") {
		t.Fatalf("share args:\n%q\nwant\n%q", s, want)
	}
}
