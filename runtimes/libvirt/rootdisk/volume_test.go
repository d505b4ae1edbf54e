package rootdisk_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/rootdisk"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// qemuImg runs qemu-img; the test is skipped without it.
func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed")
	}
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// volumeWithSnapshots is a filesystem root volume holding a qcow2 disk
// with n internal snapshots, s1 (oldest) to s<n>.
func volumeWithSnapshots(t *testing.T, n int) *vm.RootVolume {
	t.Helper()
	v := &vm.RootVolume{ContainerPath: "/data", HostPath: t.TempDir(), Format: vm.FormatQcow2, Field: "config.mounts[0]"}
	disk := rootvol.DiskPath(v)
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "16M")
	for i := 1; i <= n; i++ {
		qemuImg(t, "snapshot", "-c", fmt.Sprintf("s%d", i), disk)
	}
	return v
}

// A root volume whose disk holds more snapshots than a VM may have is
// refused at create (each would be redefined in libvirt, past the VM
// API's cap); the runtime's cap, 0 being the default, is the one.
func TestPrepareRootVolumeSnapshotCap(t *testing.T) {
	v := volumeWithSnapshots(t, 9)
	e := coretest.New(t)
	disks := rootdisk.New(rootdisk.CoreOf(e.R))
	note := func(string) {}
	_, err := disks.PrepareRootVolume(context.Background(), v, rootvol.Source{}, note)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("9 snapshots, the default cap: %v, want FailedPrecondition", err)
	}
	for _, want := range []string{"/data", "9 internal snapshots", "max_snapshots_per_vm = 8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	e.R.Opts.MaxSnapshotsPerVM = 9
	if imported, err := disks.PrepareRootVolume(context.Background(), v, rootvol.Source{}, note); err != nil || imported {
		t.Fatalf("9 snapshots, cap 9: imported %v, %v", imported, err)
	}
	// A VM already made starts whatever its disk holds: it redefines
	// nothing.
	e.R.Opts.MaxSnapshotsPerVM = 2
	c := &store.Container{ID: "c1", RootVolume: &store.RootVolume{ContainerPath: v.ContainerPath, HostPath: v.HostPath, Format: v.Format}}
	if err := disks.CheckRootVolume(c); err != nil {
		t.Fatalf("a VM already made, 9 snapshots over a cap of 2: %v", err)
	}
}

// RedefineVolumeSnapshots never gives a domain more snapshots than the
// cap, whatever the disk holds by the time it lists them: the newest
// ones, the newest current.
func TestRedefineVolumeSnapshotsCap(t *testing.T) {
	v := volumeWithSnapshots(t, 9)
	for _, tc := range []struct {
		cap, want int
		first     string // the oldest redefined
	}{{0, 8, "s2"}, {3, 3, "s7"}, {16, 9, "s1"}} {
		t.Run(fmt.Sprint("cap ", tc.cap), func(t *testing.T) {
			e := coretest.New(t)
			e.R.Opts.MaxSnapshotsPerVM = tc.cap
			l, _ := e.Libvirt.Get()
			dom, err := l.Define(`<domain type="kvm"><name>vm1</name><memory unit="MiB">64</memory></domain>`)
			if err != nil {
				t.Fatal(err)
			}
			n, err := rootdisk.New(rootdisk.CoreOf(e.R)).RedefineVolumeSnapshots(context.Background(), l, dom, rootvol.DiskPath(v))
			d, _ := e.Libvirt.Domain("vm1")
			if len(d.Snapshots) != tc.want || n != tc.want {
				t.Fatalf("redefined %d (said %d) of 9, cap %d: want %d", len(d.Snapshots), n, tc.cap, tc.want)
			}
			if d.Snapshots[tc.first] == nil || d.Current != "s9" {
				t.Fatalf("redefined %v, current %s: want %s to s9, s9 current", keys(d.Snapshots), d.Current, tc.first)
			}
			if tc.want < 9 {
				if err == nil || !strings.Contains(err.Error(), "9 internal snapshots") {
					t.Fatalf("cap %d: the ones left out unsaid: %v", tc.cap, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
