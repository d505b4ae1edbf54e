package identity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadIsStableAndSurvivesAWipe(t *testing.T) {
	dir := t.TempDir()
	first, err := Load(dir)
	if err != nil || !strings.HasPrefix(first, "crimux-") {
		t.Fatalf("Load: %q, %v", first, err)
	}
	again, _ := Load(dir)
	if again != first {
		t.Fatalf("second Load %q != first %q", again, first)
	}
	if err := os.Remove(filepath.Join(dir, fileName)); err != nil {
		t.Fatal(err)
	}
	wiped, _ := Load(dir)
	if wiped != first {
		t.Fatalf("after a wipe the identity changed: %q -> %q", first, wiped)
	}
}

func TestKeptIdentityWins(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fileName), []byte("crimux-moved\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, _ := Load(dir); id != "crimux-moved" {
		t.Fatalf("Load = %q, want the kept crimux-moved", id)
	}
}

func TestDifferentStateDirsDiffer(t *testing.T) {
	if Derive("/var/lib/crimux") == Derive("/var/lib/crimux-b") {
		t.Fatal("two state dirs on one node share an identity")
	}
}

// TestReadWritesNothing: Read gives what Load would, kept or derived,
// and leaves the state dir as it was.
func TestReadWritesNothing(t *testing.T) {
	dir := t.TempDir()
	if id, err := Read(dir); err != nil || id != Derive(dir) {
		t.Fatalf("Read of a state dir without identity: %q, %v; want %q", id, err, Derive(dir))
	}
	if _, err := os.Stat(filepath.Join(dir, fileName)); !os.IsNotExist(err) {
		t.Fatalf("Read wrote the identity file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, fileName), []byte("crimux-kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := Read(dir); err != nil || id != "crimux-kept" {
		t.Fatalf("Read = %q, %v; want the kept crimux-kept", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, fileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("Read of an empty identity file: %v", err)
	}
}
