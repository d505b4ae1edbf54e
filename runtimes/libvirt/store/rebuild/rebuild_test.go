package rebuild

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// requireSameRecords fails unless the store in dir holds exactly the
// records of pods, field for field.
func requireSameRecords(t *testing.T, dir string, pods ...pod) {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sbs, _ := st.Sandboxes()
	cs, _ := st.Containers()
	if len(sbs) != len(pods) || len(cs) != len(pods) {
		t.Fatalf("rebuilt %d pods and %d VMs, want %d of each", len(sbs), len(cs), len(pods))
	}
	for _, p := range pods {
		sb, err := st.Sandbox(p.sb.ID)
		if err != nil || !proto.Equal(sb.Config, p.sb.Config) || !sameJSON(t, sb, p.sb) {
			t.Fatalf("pod %s rebuilt as %+v (%v), was %+v", p.sb.ID, sb, err, p.sb)
		}
		c, err := st.Container(p.c.ID)
		if err != nil || !proto.Equal(c.Config, p.c.Config) || !sameJSON(t, c, p.c) {
			t.Fatalf("VM %s rebuilt as %+v (%v), was %+v", p.c.ID, c, err, p.c)
		}
	}
}

// sameJSON compares two records but for their configs' bytes (a map's
// protobuf encoding has no fixed order): the configs are compared whole.
func sameJSON(t *testing.T, a, b any) bool {
	enc := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		delete(m, "config")
		out, _ := json.Marshal(m)
		return string(out)
	}
	return enc(a) == enc(b)
}

// TestRebuildProvenPods: a damaged store is moved aside whole, and the new
// one holds every VM pod whose domain and directories agree, running or
// exited, as its records were.
func TestRebuildProvenPods(t *testing.T) {
	f := newFixture(t)
	running := f.vmPod(t, "web", true, nil)
	exited := f.vmPod(t, "batch", false, nil)
	f.damage(t)
	damaged, _ := os.ReadFile(f.storePath())

	rep, err := f.run(t, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sandboxes) != 2 || len(rep.Containers) != 2 || len(rep.LeftAlone) != 0 || !strings.Contains(rep.Damage, "truncated") {
		t.Fatalf("report %+v", rep)
	}
	if want := f.storePath() + ".damaged-20261201T100000.000Z"; rep.MovedTo != want {
		t.Fatalf("moved to %q, want %q", rep.MovedTo, want)
	}
	if kept, _ := os.ReadFile(rep.MovedTo); !bytes.Equal(kept, damaged) {
		t.Fatal("the damaged store was not kept as it was")
	}
	if err := store.Check(f.state); err != nil {
		t.Fatalf("the new store: %v", err)
	}
	requireSameRecords(t, f.state, running, exited)
	for _, c := range rep.Containers {
		if c.ID == running.c.ID && c.State != "CONTAINER_RUNNING, domain running" || c.Pod == "" {
			t.Fatalf("report of %s: %+v", c.ID, c)
		}
	}
}

// TestRebuildWithoutStore: a store already gone (moved aside by hand) is
// rebuilt the same way, nothing moved.
func TestRebuildWithoutStore(t *testing.T) {
	f := newFixture(t)
	p := f.vmPod(t, "web", true, nil)
	f.st.Close()
	if err := os.Remove(f.storePath()); err != nil {
		t.Fatal(err)
	}
	rep, err := f.run(t, false)
	if err != nil || rep.MovedTo != "" || rep.Damage != "" {
		t.Fatalf("rebuild without a store: %+v, %v", rep, err)
	}
	requireSameRecords(t, f.state, p)
}

// TestRebuildDryRun changes nothing.
func TestRebuildDryRun(t *testing.T) {
	f := newFixture(t)
	f.vmPod(t, "web", true, nil)
	f.damage(t)
	before := tree(t, f.state)
	damaged, _ := os.ReadFile(f.storePath())
	rep, err := f.run(t, true)
	if err != nil || len(rep.Containers) != 1 || rep.MovedTo != "" || !rep.DryRun {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	if after, _ := os.ReadFile(f.storePath()); !bytes.Equal(after, damaged) || len(tree(t, f.state)) != len(before) {
		t.Fatal("a dry run changed the state dir")
	}
	if matches, _ := filepath.Glob(f.storePath() + ".*"); len(matches) != 0 {
		t.Fatalf("a dry run left %v", matches)
	}
}

// TestRebuildRefuses: a store crimux can open, one of a newer format and
// one a process holds are left exactly as they are; without libvirt's
// domains nothing is proven, so nothing is done.
func TestRebuildRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		prepare func(t *testing.T, f *fixture)
		want    string
		is      error
	}{
		"intact": {prepare: func(t *testing.T, f *fixture) { f.st.Close() }, want: "is intact"},
		"newer format": {prepare: func(t *testing.T, f *fixture) {
			f.st.Close()
			setFormat(t, f.storePath(), "99")
		}, want: "format 99, written by a newer crimux"},
		"in use":          {prepare: func(t *testing.T, f *fixture) {}, is: store.ErrInUse, want: "stop crimux first"},
		"libvirt is away": {prepare: func(t *testing.T, f *fixture) { f.damage(t); f.lv.Fail("ListAll", errors.New("no libvirtd")) }, want: "list libvirt's domains"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.vmPod(t, "web", true, nil)
			f.st.FlushCopies()
			tc.prepare(t, f)
			before := tree(t, f.state)
			storeBefore, _ := os.ReadFile(f.storePath())
			rep, err := f.run(t, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("rebuild: %+v, %v; want an error saying %q", rep, err, tc.want)
			}
			if after, _ := os.ReadFile(f.storePath()); !bytes.Equal(after, storeBefore) {
				t.Fatal("the refused store was changed")
			}
			if after := tree(t, f.state); len(after) != len(before) {
				t.Fatalf("files %d -> %d", len(before), len(after))
			}
			if matches, _ := filepath.Glob(f.storePath() + ".*"); len(matches) != 0 {
				t.Fatalf("a refused rebuild left %v", matches)
			}
		})
	}
}
