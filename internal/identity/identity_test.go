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
