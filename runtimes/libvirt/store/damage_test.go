package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// storeWithRecords makes a store with a few hundred records (pages past
// the first few), closed, and returns its file.
func storeWithRecords(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		sb := testSandbox(i)
		if err := st.PutSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "vm.db")
}

func requireDamaged(t *testing.T, path, what string) {
	t.Helper()
	_, err := Open(filepath.Dir(path))
	var damaged *DamagedError
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !errors.As(err, &damaged) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "crimuxctl store rebuild --state-dir "+filepath.Dir(path)) || !strings.Contains(err.Error(), what) {
		t.Fatalf("open a store %s: %v", what, err)
	}
	if err := Check(filepath.Dir(path)); !errors.As(err, &damaged) {
		t.Fatalf("Check of a store %s: %v, want it damaged", what, err)
	}
}

// TestDamagedStore: a store cut short, emptied or overwritten is refused
// with an error naming the file and the way out, and left as it was; a
// truncated one must not reach bolt.Open, which dies of SIGBUS on it.
func TestDamagedStore(t *testing.T) {
	t.Run("truncated", func(t *testing.T) {
		path := storeWithRecords(t)
		fi, _ := os.Stat(path)
		if err := os.Truncate(path, fi.Size()/3); err != nil {
			t.Fatal(err)
		}
		requireDamaged(t, path, "truncated")
		if after, _ := os.Stat(path); after.Size() != fi.Size()/3 {
			t.Fatalf("the refused store changed size: %d", after.Size())
		}
	})
	t.Run("empty", func(t *testing.T) {
		path := storeWithRecords(t)
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		requireDamaged(t, path, "empty")
	})
	t.Run("meta pages overwritten", func(t *testing.T) {
		path := storeWithRecords(t)
		overwrite(t, path, 0, 16<<10)
		requireDamaged(t, path, "neither meta page is intact")
	})
	t.Run("a data page overwritten", func(t *testing.T) {
		path := storeWithRecords(t)
		fi, _ := os.Stat(path)
		overwrite(t, path, fi.Size()/2, 4096)
		requireDamaged(t, path, "do not hold together")
	})
	t.Run("intact", func(t *testing.T) {
		path := storeWithRecords(t)
		st, err := Open(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if all, err := st.Sandboxes(); err != nil || len(all) != 300 {
			t.Fatalf("%d sandboxes, %v", len(all), err)
		}
	})
}

func overwrite(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := []byte(strings.Repeat("\xa5junk", int(n/5)+1))[:n]
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func testSandbox(i int) *Sandbox {
	return &Sandbox{ID: fmt.Sprintf("%032x", i), Handler: "vm",
		Config: &runtimeapi.PodSandboxConfig{Hostname: strings.Repeat("h", 200), Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprint("pod-", i)}}}
}
