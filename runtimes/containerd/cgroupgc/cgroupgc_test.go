package cgroupgc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// A fake hierarchy on a plain directory tree: the sweep only reads
// directories and cgroup.procs, and rmdirs.

const (
	strayID = "1111111111111111111111111111111111111111111111111111111111111111"
	liveID  = "2222222222222222222222222222222222222222222222222222222222222222"
	busyID  = "3333333333333333333333333333333333333333333333333333333333333333"
	freshID = "4444444444444444444444444444444444444444444444444444444444444444"
)

func mkleaf(t *testing.T, dir, procs string, age time.Duration) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// cgroupfs has the interface files in every cgroup; rmdir there
	// ignores them (the tests' sweeper removes with os.RemoveAll).
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(procs), 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(dir, at, at); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSweepRemovesOnlyOldEmptyUnknownLeaves(t *testing.T) {
	root := t.TempDir()
	roots := []string{filepath.Join(root, "cpuset"), filepath.Join(root, "memory")}
	s, err := New(filepath.Join(root, "records"), func() ([]string, error) { return roots, nil },
		func(p string) (string, error) { return p, nil },
		func(context.Context) (map[string]bool, error) { return map[string]bool{liveID: true}, nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	parent := "/kubepods/pod1"
	if err := s.Record(parent); err != nil || s.Record(parent) != nil {
		t.Fatalf("record: %v", err)
	}
	s.rmdir = os.RemoveAll
	stray := mkleaf(t, filepath.Join(roots[0], parent, strayID), "", time.Hour)
	strayScope := mkleaf(t, filepath.Join(roots[0], parent, "cri-containerd-"+strayID+".scope"), "", time.Hour)
	live := mkleaf(t, filepath.Join(roots[0], parent, liveID), "", time.Hour)
	fresh := mkleaf(t, filepath.Join(roots[1], parent, freshID), "", time.Second)
	other := mkleaf(t, filepath.Join(roots[1], parent, "not-a-container"), "", time.Hour)
	busyDir := filepath.Join(roots[1], parent, busyID)
	mkleaf(t, filepath.Join(busyDir, "child"), "", time.Hour)
	mkleaf(t, busyDir, "", time.Hour)
	running := mkleaf(t, filepath.Join(roots[0], parent, busyID), "4242\n", time.Hour)

	rep, err := s.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(rep.Removed)
	want := []string{strayScope, stray}
	sort.Strings(want)
	if strings.Join(rep.Removed, ",") != strings.Join(want, ",") {
		t.Fatalf("removed %v, want %v", rep.Removed, want)
	}
	for _, kept := range []string{live, fresh, other, busyDir, running} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}

	// The parent gone from every hierarchy (kubelet removed the pod's
	// cgroup): the record goes.
	for _, r := range roots {
		if err := os.RemoveAll(filepath.Join(r, "kubepods")); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = s.Sweep(context.Background())
	if err != nil || rep.Dropped != 1 {
		t.Fatalf("second sweep: %+v, %v; want the record dropped", rep, err)
	}
	if recs, _ := s.records(); len(recs) != 0 {
		t.Fatalf("records left: %v", recs)
	}
}

func TestSweepWithoutContainerdRemovesNothing(t *testing.T) {
	root := t.TempDir()
	s, _ := New(filepath.Join(root, "records"), func() ([]string, error) { return []string{root}, nil },
		func(p string) (string, error) { return p, nil },
		func(context.Context) (map[string]bool, error) { return nil, errors.New("containerd is down") },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.rmdir = os.RemoveAll
	_ = s.Record("/pod")
	leaf := mkleaf(t, filepath.Join(root, "pod", strayID), "", time.Hour)
	if _, err := s.Sweep(context.Background()); err == nil {
		t.Fatal("a sweep without containerd's answer went ahead")
	}
	if _, err := os.Stat(leaf); err != nil {
		t.Fatal("a leaf was removed without knowing containerd's containers")
	}
}

// fakeReaper ends a task by emptying its leaves' cgroup.procs, as a killed
// and deleted task leaves them; begun and inFlight are what Calls reports.
type fakeReaper struct {
	leaves   map[string][]string // id -> its leaves
	reaped   []string
	begun    uint64
	inFlight bool
}

func (f *fakeReaper) Calls() (uint64, bool) { return f.begun, f.inFlight }

func (f *fakeReaper) Reap(_ context.Context, id string) error {
	f.reaped = append(f.reaped, id)
	for _, l := range f.leaves[id] {
		if err := os.WriteFile(filepath.Join(l, "cgroup.procs"), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func TestSweepReapsOrphanedTasksOnlyWhenQuiet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inFlight   bool
		callDuring bool // a task-making call begins while the sweep lists IDs
		wantReaped bool
	}{
		{"quiet", false, false, true},
		{"a call in flight", true, false, false},
		{"a call began meanwhile", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			roots := []string{filepath.Join(root, "cpuset"), filepath.Join(root, "memory")}
			f := &fakeReaper{inFlight: tc.inFlight}
			s, err := New(filepath.Join(root, "records"), func() ([]string, error) { return roots, nil },
				func(p string) (string, error) { return p, nil },
				func(context.Context) (map[string]bool, error) {
					if tc.callDuring {
						f.begun++
					}
					return map[string]bool{liveID: true}, nil
				},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			s.SetReaper(f)
			s.rmdir = os.RemoveAll
			parent := "/kubepods/pod1"
			_ = s.Record(parent)
			orphan := []string{
				mkleaf(t, filepath.Join(roots[0], parent, busyID), "4242\n", time.Hour),
				mkleaf(t, filepath.Join(roots[1], parent, busyID), "4242\n", time.Hour),
			}
			f.leaves = map[string][]string{busyID: orphan}
			live := mkleaf(t, filepath.Join(roots[0], parent, liveID), "77\n", time.Hour)
			young := mkleaf(t, filepath.Join(roots[0], parent, freshID), "88\n", time.Second)

			rep, err := s.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantReaped {
				if len(f.reaped) != 0 || len(rep.Reaped) != 0 {
					t.Fatalf("reaped %v (report %v) while task-making calls ran", f.reaped, rep.Reaped)
				}
				for _, l := range orphan {
					if _, err := os.Stat(l); err != nil {
						t.Errorf("%s removed: %v", l, err)
					}
				}
				return
			}
			if strings.Join(f.reaped, ",") != busyID || strings.Join(rep.Reaped, ",") != busyID {
				t.Fatalf("reaped %v (report %v), want %s once", f.reaped, rep.Reaped, busyID)
			}
			sort.Strings(rep.Removed)
			if strings.Join(rep.Removed, ",") != strings.Join(orphan, ",") {
				t.Fatalf("removed %v, want the ended task's leaves %v", rep.Removed, orphan)
			}
			for _, kept := range []string{live, young} {
				if _, err := os.Stat(kept); err != nil {
					t.Errorf("%s was removed: %v", kept, err)
				}
			}
		})
	}
}
