package template

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestKey(t *testing.T) {
	s := Shape{VCPUs: 2, MaxVCPUs: 4, MemoryMiB: 1024, MaxMemoryMiB: 2048, Accel: "tcg"}
	k := Key("sha256:ab", s, "v1")
	if !validKey(k) || k != Key("sha256:ab", s, "v1") {
		t.Fatalf("key %q: want 16 hex digits, the same for the same inputs", k)
	}
	other := s
	other.MemoryMiB = 512
	for name, k2 := range map[string]string{
		"image": Key("sha256:cd", s, "v1"), "shape": Key("sha256:ab", other, "v1"), "version": Key("sha256:ab", s, "v2"),
	} {
		if k2 == k {
			t.Errorf("another %s, the same key", name)
		}
	}
}

// TestStore: a template's directory is root's alone; its meta is written
// whole, read back, listed and removed; a second Create of a key is
// AlreadyExists; a directory without meta lists as failed.
func TestStore(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "templates")}
	m := Meta{Key: "0123456789abcdef", Image: "img", ImageDigest: "sha256:ab", Shape: Shape{VCPUs: 1, MemoryMiB: 512, Accel: "tcg"}}
	if err := s.Create(m); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(m); errdefs.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second Create: %v, want AlreadyExists", err)
	}
	if st, err := os.Stat(s.Paths(m.Key).Dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the template's directory: %v, %v; want 0700", st.Mode(), err)
	}
	got, err := s.Get(m.Key)
	if err != nil || got.State != Making || got.Image != "img" {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	got.State = Ready
	if err := s.Put(got); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.Dir, "fedcba9876543210"), 0o700); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].State != Ready || list[1].State != Failed {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if err := os.WriteFile(s.Paths(m.Key).State, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, n, err := s.Usage(); err != nil || b < 8192 || n < 4 {
		t.Fatalf("Usage: %d bytes, %d inodes, %v", b, n, err)
	}
	if err := s.Remove(m.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(m.Key); !errdefs.IsNotFound(err) {
		t.Fatalf("Get after Remove: %v, want NotFound", err)
	}
	if _, err := s.Get("../etc"); errdefs.Code(err).String() != "InvalidArgument" {
		t.Fatalf("a key that is a path: %v", err)
	}
}
