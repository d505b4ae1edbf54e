package cloudinit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/testutil"
)

const (
	tenantData = "#cloud-config\nhostname: from-the-volume\n"
	// hostData stands for a root-only host file: it must never come out.
	hostData = "#cloud-config\nhostname: host-secret\n"
)

// forEachResolver runs test with openat2, then as on a kernel without
// it (before 5.6), with walkBeneath.
func forEachResolver(t *testing.T, test func(t *testing.T)) {
	t.Run("openat2", test)
	t.Run("walk", func(t *testing.T) {
		real := openat2
		openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
		defer func() { openat2 = real }()
		test(t)
	})
}

// fromVolume is FromPod with vol mounted at MountPath.
func fromVolume(vol string) (Source, error) {
	return FromPod(nil, nil, []*runtimeapi.Mount{{ContainerPath: MountPath, HostPath: vol, Readonly: true}})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// hostFile is a root-only file outside any volume; it returns its
// directory.
func hostFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, UserDataFile), hostData)
	return dir
}

// wantRefused: the read is an InvalidArgument naming the mount and
// saying why, and nothing of the host file is in it.
func wantRefused(t *testing.T, s Source, err error, why string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config.mounts[0]") ||
		!strings.Contains(err.Error(), why) {
		t.Fatalf("err = %v, want InvalidArgument naming config.mounts[0] and %q", err, why)
	}
	if strings.Contains(string(s.UserData), "host-secret") {
		t.Fatalf("the host file was read: %q", s.UserData)
	}
}

// TestUserDataFromKubeletVolume: kubelet's Secret and ConfigMap volumes
// are relative symbolic links inside the volume (user-data ->
// ..data/user-data, ..data -> ..<timestamp>), swapped atomically on an
// update; every read while kubelet updates gives one version or the
// other, never an error.
func TestUserDataFromKubeletVolume(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		vol := t.TempDir()
		for i, ts := range []string{"..2024_01_01_00_00_00.1", "..2024_01_01_00_00_00.2"} {
			if err := os.Mkdir(filepath.Join(vol, ts), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(vol, ts, UserDataFile), strings.Replace(tenantData, "volume", "volume-"+string(rune('1'+i)), 1))
		}
		symlink(t, "..2024_01_01_00_00_00.1", filepath.Join(vol, "..data"))
		symlink(t, "..data/"+UserDataFile, filepath.Join(vol, UserDataFile))
		s, err := fromVolume(vol)
		if err != nil || string(s.UserData) != strings.Replace(tenantData, "volume", "volume-1", 1) {
			t.Fatalf("user-data = %q, %v", s.UserData, err)
		}

		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // kubelet's AtomicWriter: a new ..data_tmp renamed over ..data
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tmp := filepath.Join(vol, "..data_tmp")
				_ = os.Symlink("..2024_01_01_00_00_00."+string(rune('1'+i%2)), tmp)
				_ = os.Rename(tmp, filepath.Join(vol, "..data"))
			}
		}()
		defer func() { close(stop); <-done }()
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			s, err := fromVolume(vol)
			if err != nil || !strings.Contains(string(s.UserData), "from-the-volume-") {
				t.Fatalf("during an update: user-data = %q, %v", s.UserData, err)
			}
		}
	})
}

// TestUserDataLinksInsideTheVolume: links and ".." that stay inside the
// volume are followed however they are spelled; a loop is refused.
func TestUserDataLinksInsideTheVolume(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		for _, tc := range []struct{ name, target, err string }{
			{"dot", "./d/" + UserDataFile, ""},
			{"dot-dot back in", "d/../d/" + UserDataFile, ""},
			{"link to a directory link", "sub/" + UserDataFile, ""},
			{"dot-dot out of a linked directory", "sub/../d/" + UserDataFile, ""},
			{"deep", "deep/x/../../sub/./" + UserDataFile, ""},
			{"loop", "loop/" + UserDataFile, "too many levels of symbolic links"},
			{"a directory", "d", "is a directory, not a regular file"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				vol := t.TempDir()
				for _, d := range []string{"d", "deep/x"} {
					if err := os.MkdirAll(filepath.Join(vol, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				writeFile(t, filepath.Join(vol, "d", UserDataFile), tenantData)
				symlink(t, "d", filepath.Join(vol, "sub"))
				symlink(t, "loop", filepath.Join(vol, "loop"))
				symlink(t, tc.target, filepath.Join(vol, UserDataFile))
				s, err := fromVolume(vol)
				if tc.err != "" {
					wantRefused(t, s, err, tc.err)
				} else if err != nil || string(s.UserData) != tenantData {
					t.Fatalf("user-data = %q, %v", s.UserData, err)
				}
			})
		}
	})
}

// TestUserDataRefusesEscapingSymlink: a link out of the volume, however
// spelled, is refused, not followed (nor confined into the volume).
func TestUserDataRefusesEscapingSymlink(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		outside := hostFile(t)
		for _, tc := range []struct {
			name  string
			links func(vol string) map[string]string // link -> target
		}{
			{"absolute", func(string) map[string]string {
				return map[string]string{UserDataFile: filepath.Join(outside, UserDataFile)}
			}},
			{"dot-dot", func(vol string) map[string]string {
				rel, _ := filepath.Rel(vol, filepath.Join(outside, UserDataFile))
				return map[string]string{UserDataFile: rel}
			}},
			{"through a directory link", func(string) map[string]string {
				return map[string]string{"..data": outside, UserDataFile: "..data/" + UserDataFile}
			}},
			{"dot-dot past the root in a chain", func(vol string) map[string]string {
				rel, _ := filepath.Rel(vol, outside)
				return map[string]string{"sub": ".", UserDataFile: "sub/sub/" + rel + "/" + UserDataFile}
			}},
			{"proc magic link", func(string) map[string]string {
				return map[string]string{UserDataFile: "/proc/self/root" + filepath.Join(outside, UserDataFile)}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				vol := t.TempDir()
				for link, target := range tc.links(vol) {
					symlink(t, target, filepath.Join(vol, link))
				}
				s, err := fromVolume(vol)
				wantRefused(t, s, err, "outside the volume")
			})
		}
	})
}

// TestUserDataRefusesFIFO: a FIFO named user-data is refused at once;
// opening it for reading would wait for a writer, forever, while
// CreateContainer holds the pod's lock.
func TestUserDataRefusesFIFO(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		vol := t.TempDir()
		fifo := filepath.Join(vol, UserDataFile)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		type result struct {
			s   Source
			err error
		}
		got := make(chan result, 1)
		go func() {
			s, err := fromVolume(vol)
			got <- result{s, err}
		}()
		select {
		case r := <-got:
			wantRefused(t, r.s, r.err, "not a regular file")
		case <-time.After(3 * time.Second):
			// Let the stuck reader go before the directory is removed.
			if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
			t.Fatal("reading a FIFO named user-data did not return in 3 s")
		}
	})
}

// TestUserDataRefusesDevice: a device node named user-data is refused
// without being opened (opening some devices acts: a watchdog starts, a
// tape rewinds), nor is a socket or a directory read.
func TestUserDataRefusesDevice(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		for _, tc := range []struct {
			name string
			make func(path string) error
		}{
			{"char device", func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }},
			{"block device", func(p string) error { return unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))) }},
			{"socket", func(p string) error { return unix.Mknod(p, unix.S_IFSOCK|0o600, 0) }},
			{"directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				vol := t.TempDir()
				node := filepath.Join(vol, UserDataFile)
				if err := tc.make(node); errors.Is(err, syscall.EPERM) {
					t.Skipf("cannot make a %s here: %v", tc.name, err)
				} else if err != nil {
					t.Fatal(err)
				}
				var fs unix.Statfs_t
				if err := unix.Statfs(vol, &fs); err != nil {
					t.Fatal(err)
				}
				if fs.Flags&unix.ST_NODEV != 0 {
					t.Skipf("%s is on a nodev mount: no device could be opened there anyway", vol)
				}
				opens := testutil.WatchOpens(t, node)
				s, err := fromVolume(vol)
				wantRefused(t, s, err, "not a regular file")
				if n := opens(); n > 0 {
					t.Fatalf("%s was opened %d times", node, n)
				}
			})
		}
	})
}

// TestUserDataSwapRace: the tenant swaps a directory of its volume for a
// link to a host directory, again and again, while crimux reads; the
// host file never comes out (checking a path and then opening it again
// let it).
func TestUserDataSwapRace(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		vol := t.TempDir()
		if err := os.Mkdir(filepath.Join(vol, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(vol, "d", UserDataFile), tenantData)
		symlink(t, "d/"+UserDataFile, filepath.Join(vol, UserDataFile))
		symlink(t, hostFile(t), filepath.Join(vol, "alt"))

		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			d, alt := filepath.Join(vol, "d"), filepath.Join(vol, "alt")
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		defer func() { close(stop); <-done }()
		var reads, ok int
		for end := time.Now().Add(time.Second); time.Now().Before(end); reads++ {
			s, err := fromVolume(vol)
			if strings.Contains(string(s.UserData), "host-secret") {
				t.Fatalf("read %d returned the host file: %q", reads, s.UserData)
			}
			if err == nil && string(s.UserData) == tenantData {
				ok++
			}
		}
		t.Logf("%d reads, %d of the volume's file, none of the host's", reads, ok)
		if ok == 0 {
			t.Fatal("no read gave the volume's own file: the race was not run")
		}
	})
}

// TestUserDataVolumeRootIsNotFollowed: the volume's host path is a
// directory kubelet made; a link there is refused, not followed.
func TestUserDataVolumeRootIsNotFollowed(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "vol")
		symlink(t, hostFile(t), root)
		s, err := fromVolume(root)
		wantRefused(t, s, err, "not a directory")
	})
}

// TestUserDataAbsentOrTooBig: no user-data file is no user-data; a
// file larger than the limit is refused after reading just past it.
func TestUserDataAbsentOrTooBig(t *testing.T) {
	vol := t.TempDir()
	if s, err := fromVolume(vol); err != nil || s.UserData != nil {
		t.Fatalf("empty volume: %q, %v", s.UserData, err)
	}
	writeFile(t, filepath.Join(vol, UserDataFile), "#cloud-config\n#"+strings.Repeat("x", MaxUserData)+"\n")
	s, err := fromVolume(vol)
	wantRefused(t, s, err, "more than")
}
