package tenantfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testutil"
)

// ReadBeneath's tests read a cloud-init volume's user-data file, the file
// it is there for.
const (
	userDataFile = "user-data"
	tenantData   = "#cloud-config\nhostname: from-the-volume\n"
	// hostData stands for a root-only host file: it must never come out.
	hostData = "#cloud-config\nhostname: host-secret\n"
)

// read is what ReadBeneath gave.
type read struct{ data []byte }

// fromVolume reads vol's user-data file.
func fromVolume(vol string) (read, error) {
	b, err := ReadBeneath(vol, userDataFile, 1<<20)
	return read{b}, err
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
	writeFile(t, filepath.Join(dir, userDataFile), hostData)
	return dir
}

// wantRefused: the read failed saying why, and nothing of the host file
// is in it.
func wantRefused(t *testing.T, s read, err error, why string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("err = %v, want one saying %q", err, why)
	}
	if strings.Contains(string(s.data), "host-secret") {
		t.Fatalf("the host file was read: %q", s.data)
	}
}

// TestReadBeneathFromKubeletVolume: kubelet's Secret and ConfigMap volumes
// are relative symbolic links inside the volume (user-data ->
// ..data/user-data, ..data -> ..<timestamp>), swapped atomically on an
// update; every read while kubelet updates gives one version or the
// other, never an error.
func TestReadBeneathFromKubeletVolume(t *testing.T) {
	both(t, func(t *testing.T) {
		vol := t.TempDir()
		for i, ts := range []string{"..2024_01_01_00_00_00.1", "..2024_01_01_00_00_00.2"} {
			if err := os.Mkdir(filepath.Join(vol, ts), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(vol, ts, userDataFile), strings.Replace(tenantData, "volume", "volume-"+string(rune('1'+i)), 1))
		}
		symlink(t, "..2024_01_01_00_00_00.1", filepath.Join(vol, "..data"))
		symlink(t, "..data/"+userDataFile, filepath.Join(vol, userDataFile))
		s, err := fromVolume(vol)
		if err != nil || string(s.data) != strings.Replace(tenantData, "volume", "volume-1", 1) {
			t.Fatalf("user-data = %q, %v", s.data, err)
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
			if err != nil || !strings.Contains(string(s.data), "from-the-volume-") {
				t.Fatalf("during an update: user-data = %q, %v", s.data, err)
			}
		}
	})
}

// TestReadBeneathLinksInsideTheVolume: links and ".." that stay inside the
// volume are followed however they are spelled; a loop is refused.
func TestReadBeneathLinksInsideTheVolume(t *testing.T) {
	both(t, func(t *testing.T) {
		for _, tc := range []struct{ name, target, err string }{
			{"dot", "./d/" + userDataFile, ""},
			{"dot-dot back in", "d/../d/" + userDataFile, ""},
			{"link to a directory link", "sub/" + userDataFile, ""},
			{"dot-dot out of a linked directory", "sub/../d/" + userDataFile, ""},
			{"deep", "deep/x/../../sub/./" + userDataFile, ""},
			{"loop", "loop/" + userDataFile, "too many levels of symbolic links"},
			{"a directory", "d", "is a directory, not a regular file"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				vol := t.TempDir()
				for _, d := range []string{"d", "deep/x"} {
					if err := os.MkdirAll(filepath.Join(vol, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				writeFile(t, filepath.Join(vol, "d", userDataFile), tenantData)
				symlink(t, "d", filepath.Join(vol, "sub"))
				symlink(t, "loop", filepath.Join(vol, "loop"))
				symlink(t, tc.target, filepath.Join(vol, userDataFile))
				s, err := fromVolume(vol)
				if tc.err != "" {
					wantRefused(t, s, err, tc.err)
				} else if err != nil || string(s.data) != tenantData {
					t.Fatalf("user-data = %q, %v", s.data, err)
				}
			})
		}
	})
}

// TestReadBeneathRefusesEscapingSymlink: a link out of the volume, however
// spelled, is refused, not followed (nor confined into the volume).
func TestReadBeneathRefusesEscapingSymlink(t *testing.T) {
	both(t, func(t *testing.T) {
		outside := hostFile(t)
		for _, tc := range []struct {
			name  string
			links func(vol string) map[string]string // link -> target
		}{
			{"absolute", func(string) map[string]string {
				return map[string]string{userDataFile: filepath.Join(outside, userDataFile)}
			}},
			{"dot-dot", func(vol string) map[string]string {
				rel, _ := filepath.Rel(vol, filepath.Join(outside, userDataFile))
				return map[string]string{userDataFile: rel}
			}},
			{"through a directory link", func(string) map[string]string {
				return map[string]string{"..data": outside, userDataFile: "..data/" + userDataFile}
			}},
			{"dot-dot past the root in a chain", func(vol string) map[string]string {
				rel, _ := filepath.Rel(vol, outside)
				return map[string]string{"sub": ".", userDataFile: "sub/sub/" + rel + "/" + userDataFile}
			}},
			{"proc magic link", func(string) map[string]string {
				return map[string]string{userDataFile: "/proc/self/root" + filepath.Join(outside, userDataFile)}
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

// TestReadBeneathRefusesFIFO: a FIFO named user-data is refused at once;
// opening it for reading would wait for a writer, forever, while
// CreateContainer holds the pod's lock.
func TestReadBeneathRefusesFIFO(t *testing.T) {
	both(t, func(t *testing.T) {
		vol := t.TempDir()
		fifo := filepath.Join(vol, userDataFile)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		type result struct {
			s   read
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

// TestReadBeneathRefusesDevice: a device node named user-data is refused
// without being opened (opening some devices acts: a watchdog starts, a
// tape rewinds), nor is a socket or a directory read.
func TestReadBeneathRefusesDevice(t *testing.T) {
	both(t, func(t *testing.T) {
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
				node := filepath.Join(vol, userDataFile)
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

// TestReadBeneathSwapRace: the tenant swaps a directory of its volume for a
// link to a host directory, again and again, while crimux reads; the
// host file never comes out (checking a path and then opening it again
// let it).
func TestReadBeneathSwapRace(t *testing.T) {
	both(t, func(t *testing.T) {
		vol := t.TempDir()
		if err := os.Mkdir(filepath.Join(vol, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(vol, "d", userDataFile), tenantData)
		symlink(t, "d/"+userDataFile, filepath.Join(vol, userDataFile))
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
			if strings.Contains(string(s.data), "host-secret") {
				t.Fatalf("read %d returned the host file: %q", reads, s.data)
			}
			if err == nil && string(s.data) == tenantData {
				ok++
			}
		}
		t.Logf("%d reads, %d of the volume's file, none of the host's", reads, ok)
		if ok == 0 {
			t.Fatal("no read gave the volume's own file: the race was not run")
		}
	})
}

// TestReadBeneathVolumeRootIsNotFollowed: the volume's host path is a
// directory kubelet made; a link there is refused, not followed.
func TestReadBeneathVolumeRootIsNotFollowed(t *testing.T) {
	both(t, func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "vol")
		symlink(t, hostFile(t), root)
		s, err := fromVolume(root)
		wantRefused(t, s, err, "not a directory")
	})
}
