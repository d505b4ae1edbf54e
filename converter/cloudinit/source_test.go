package cloudinit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/tenantfs"
)

const (
	tenantData = "#cloud-config\nhostname: from-the-volume\n"
	// hostData stands for a root-only host file: it must never come out.
	hostData = "#cloud-config\nhostname: host-secret\n"
)

// fromVolume is FromPod with vol mounted at MountPath, read as crimux
// reads it (internal/tenantfs, which tests the resolution itself).
func fromVolume(vol string) (Source, error) {
	return FromPod(nil, nil, []*runtimeapi.Mount{{ContainerPath: MountPath, HostPath: vol, Readonly: true}}, tenantfs.ReadBeneath)
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

// TestUserDataRefusalNamesTheMount: a file the reader refuses (a link
// out of the volume) is InvalidArgument naming the mount and saying why.
func TestUserDataRefusalNamesTheMount(t *testing.T) {
	vol := t.TempDir()
	symlink(t, filepath.Join(hostFile(t), UserDataFile), filepath.Join(vol, UserDataFile))
	s, err := fromVolume(vol)
	wantRefused(t, s, err, "outside the volume")
}

// TestUserDataReadBeneathTheMount: the reader is asked for the user-data
// file of the volume at MountPath, and of no other mount.
func TestUserDataReadBeneathTheMount(t *testing.T) {
	var asked []string
	read := func(dir, name string, limit int64) ([]byte, error) {
		asked = append(asked, dir+" "+name)
		return []byte(tenantData), nil
	}
	mounts := []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/vol/data"}, {ContainerPath: MountPath + "/", HostPath: "/vol/ci"}}
	s, err := FromPod(nil, nil, mounts, read)
	if err != nil || string(s.UserData) != tenantData {
		t.Fatalf("FromPod = %q, %v", s.UserData, err)
	}
	if want := []string{"/vol/ci " + UserDataFile}; !slices.Equal(asked, want) {
		t.Fatalf("the reader was asked %q, want %q", asked, want)
	}
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
