package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// templatesMaxKept is the cap TestVMGuestInstantBounded sets
// (libvirt.template_max_kept); template_max_making stays at its default, 1.
const templatesMaxKept = 1

// TestVMGuestInstantBounded (make e2e-guest-instant): ten rounds of a
// vm-instant pod of the Debian guest, each of a new size (a new template
// shape), made and removed, the real qemu making each template beside
// the pod's own cold boot. Round 0 waits for its template to be ready;
// each later round removes its pod once its template is being made.
// Throughout, at most one template is being made (the default cap) and
// at most one is kept: round 1's making evicts round 0's ready template
// (the least recently used) first; a removed pod's making is cancelled
// and leaves nothing, not even a failed template; and after the last
// round the templates' directory is empty.
func TestVMGuestInstantBounded(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "templates.toml")
	writeFile(t, cfg, fmt.Sprintf("[libvirt]\ntemplate_max_kept = %d", templatesMaxKept))
	c := startGuestCrimux(t, "e2e-guest-instant", "--config", cfg)
	w := templateWatch{t: t, vm: c.vmClient()}
	for i := range 10 {
		memMiB := uint64(512 + 64*i)
		pod := vmPodJSON(t, fmt.Sprintf("tpl-round-%d", i), testCgroupParent(t), "")
		podID := c.crictl("runp", "--runtime", "vm-instant", pod)
		ctr := c.crictl("create", podID, vmContainerJSON(t, debianImage, int64(memMiB)<<20, ""), pod)
		c.crictl("start", ctr)
		state, within := "making", time.Minute
		if i == 0 {
			state, within = "ready", 10*time.Minute
		}
		testutil.Eventually(t, within, fmt.Sprintf("round %d's template %s", i, state), func() error {
			return w.hasState(i, memMiB, state)
		})
		if i == 1 {
			if err := w.hasState(i, 512, ""); err == nil {
				t.Fatalf("round 1: round 0's template is still kept while another is made; the cap is %d", templatesMaxKept)
			}
		}
		c.crictl("rmp", "-f", podID)
		if i == 0 {
			continue
		}
		testutil.Eventually(t, time.Minute, fmt.Sprintf("round %d's making cancelled with its pod", i), func() error {
			if err := w.hasState(i, memMiB, ""); err == nil {
				return fmt.Errorf("a template of %d MiB is still on the node", memMiB)
			}
			return nil
		})
	}
	left := w.check(10)
	if len(left) != 0 {
		t.Fatalf("templates left after the last round's pod went: %v; want none (round 0's evicted, the others cancelled)", shapes(left))
	}
	requireTemplateFilesAre(t, c, left)
}

// templateWatch reads the node's templates through the VM API.
type templateWatch struct {
	t  *testing.T
	vm vmv1.VMServiceClient
}

func (w templateWatch) list() []*vmv1.Template {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := w.vm.ListTemplates(ctx, &vmv1.ListTemplatesRequest{})
	if err != nil {
		w.t.Fatalf("ListTemplates: %v", err)
	}
	return resp.GetTemplates()
}

// check fails the test past either cap and returns the templates.
func (w templateWatch) check(round int) []*vmv1.Template {
	w.t.Helper()
	all := w.list()
	making := 0
	for _, tpl := range all {
		if tpl.GetState() == "making" {
			making++
		}
	}
	if making > 1 || len(all) > templatesMaxKept {
		w.t.Fatalf("round %d: %d templates, %d being made: %v; want at most %d kept and 1 being made", round, len(all), making, shapes(all), templatesMaxKept)
	}
	return all
}

// hasState: a template of memMiB is on the node, in state (any if "").
// A failed one fails the test: a cancelled making leaves none.
func (w templateWatch) hasState(round int, memMiB uint64, state string) error {
	w.t.Helper()
	for _, tpl := range w.check(round) {
		if tpl.GetMemoryMib() != memMiB {
			continue
		}
		if tpl.GetState() == "failed" {
			w.t.Fatalf("round %d: the template of %d MiB failed: %s", round, memMiB, tpl.GetError())
		}
		if state == "" || tpl.GetState() == state {
			return nil
		}
		return fmt.Errorf("the template of %d MiB is %s", memMiB, tpl.GetState())
	}
	return fmt.Errorf("no template of %d MiB", memMiB)
}

func shapes(all []*vmv1.Template) []string {
	var out []string
	for _, tpl := range all {
		out = append(out, fmt.Sprintf("%s %d MiB %s", tpl.GetKey(), tpl.GetMemoryMib(), tpl.GetState()))
	}
	return out
}

// requireTemplateFilesAre: the state dir's templates are exactly kept's
// directories, and what they take on disk is what the VM API reports
// for them (the bound ImageFsInfo counts).
func requireTemplateFilesAre(t *testing.T, c *crimux, kept []*vmv1.Template) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(c.stateDir, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	var reported uint64
	for _, tpl := range kept {
		want[tpl.GetKey()] = true
		reported += tpl.GetSizeBytes()
	}
	var onDisk uint64
	for _, d := range dirs {
		if !want[filepath.Base(d)] {
			t.Errorf("the state dir keeps %s, not a kept template's", d)
		}
		onDisk += diskUsage(t, d)
	}
	if len(dirs) != len(kept) {
		t.Fatalf("the state dir keeps %d template directories, want the %d kept: %v", len(dirs), len(kept), dirs)
	}
	if onDisk > reported+(1<<20) {
		t.Fatalf("the templates take %d bytes on disk, %d reported for the kept ones", onDisk, reported)
	}
	t.Logf("kept %v: %d bytes on disk", shapes(kept), onDisk)
}

// diskUsage is the bytes dir's files take on disk.
func diskUsage(t *testing.T, dir string) uint64 {
	t.Helper()
	var total uint64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += uint64(st.Blocks) * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
