package template

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestKey(t *testing.T) {
	s := Shape{VCPUs: 2, MaxVCPUs: 4, MemoryMiB: 1024, MaxMemoryMiB: 2048, Accel: "tcg"}
	k := Key("ns-a", "sha256:ab", s, "v1")
	if !validKey(k) || k != Key("ns-a", "sha256:ab", s, "v1") {
		t.Fatalf("key %q: want 16 hex digits, the same for the same inputs", k)
	}
	other := s
	other.MemoryMiB = 512
	for name, k2 := range map[string]string{
		"image": Key("ns-a", "sha256:cd", s, "v1"), "shape": Key("ns-a", "sha256:ab", other, "v1"), "version": Key("ns-a", "sha256:ab", s, "v2"),
		"namespace": Key("ns-b", "sha256:ab", s, "v1"), "no namespace": Key("", "sha256:ab", s, "v1"),
	} {
		if k2 == k {
			t.Errorf("another %s, the same key", name)
		}
	}
}

// TestMetaMismatch: a meta is its request's template only if namespace,
// image digest, shape and version are all the request's.
func TestMetaMismatch(t *testing.T) {
	s := Shape{VCPUs: 2, MaxVCPUs: 4, MemoryMiB: 1024, MaxMemoryMiB: 2048, Accel: "tcg"}
	m := Meta{Key: Key("ns-a", "sha256:ab", s, "v1"), Namespace: "ns-a", ImageDigest: "sha256:ab", Shape: s, Version: "v1"}
	if err := m.Mismatch("ns-a", "sha256:ab", s, "v1"); err != nil {
		t.Fatalf("its own request: %v", err)
	}
	other := s
	other.Accel = "kvm"
	for name, err := range map[string]error{
		"namespace": m.Mismatch("ns-b", "sha256:ab", s, "v1"), "shared": m.Mismatch("", "sha256:ab", s, "v1"),
		"digest": m.Mismatch("ns-a", "sha256:cd", s, "v1"), "shape": m.Mismatch("ns-a", "sha256:ab", other, "v1"),
		"version": m.Mismatch("ns-a", "sha256:ab", s, "v2"),
	} {
		if err == nil {
			t.Errorf("another %s: no mismatch", name)
		}
	}
}

// TestTouch: a template's last use is its meta's write or its Touch.
func TestTouch(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "templates")}
	m := Meta{Key: "0123456789abcdef"}
	if err := s.Create(m); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.Paths(m.Key).Meta, old, old); err != nil {
		t.Fatal(err)
	}
	if got := s.LastUsed(m.Key); !got.Equal(old) {
		t.Fatalf("LastUsed %v, want %v", got, old)
	}
	if err := s.Touch(m.Key); err != nil {
		t.Fatal(err)
	}
	if got := s.LastUsed(m.Key); time.Since(got) > time.Minute {
		t.Fatalf("LastUsed after Touch: %v", got)
	}
	if !s.LastUsed("fedcba9876543210").IsZero() {
		t.Fatal("a template that is not there was used")
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
