package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallStore makes a store with one record, closed, and returns its file.
func smallStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSandbox(testSandbox(1)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, FileName)
}

// TestCheck: Check tells a store crimux opens from a missing, damaged,
// newer or busy one without writing a byte of it.
func TestCheck(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		if err := Check(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Check of no store: %v", err)
		}
	})
	t.Run("intact", func(t *testing.T) {
		path := smallStore(t)
		before, _ := os.ReadFile(path)
		if err := Check(filepath.Dir(path)); err != nil {
			t.Fatalf("Check of an intact store: %v", err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatal("Check wrote to the store")
		}
	})
	t.Run("a format that is no version", func(t *testing.T) {
		path := smallStore(t)
		setFormat(t, path, "x")
		requireDamaged(t, path, `its format "x" is not a version`)
	})
	t.Run("newer", func(t *testing.T) {
		path := smallStore(t)
		setFormat(t, path, "99")
		before, _ := os.ReadFile(path)
		var newer *NewerFormatError
		if err := Check(filepath.Dir(path)); !errors.As(err, &newer) || newer.Format != 99 || !strings.Contains(err.Error(), path) {
			t.Fatalf("Check of a format-99 store: %v", err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatal("Check wrote to a newer store")
		}
	})
	t.Run("in use", func(t *testing.T) {
		dir := t.TempDir()
		st, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := Check(dir); !errors.Is(err, ErrInUse) {
			t.Fatalf("Check of an open store: %v, want ErrInUse", err)
		}
	})
}
