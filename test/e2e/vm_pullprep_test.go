package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cacheEntries are the image cache's entries of crimux c that hold files.
func cacheEntries(t *testing.T, c *crimux) []string {
	t.Helper()
	entries, _ := filepath.Glob(filepath.Join(c.stateDir, "images", "sha256-*"))
	var full []string
	for _, e := range entries {
		if files, _ := os.ReadDir(e); len(files) > 1 { // the record and the image's files
			full = append(full, e)
		}
	}
	return full
}

// TestPullPreparesTheVMDisk: pulling a VM image through crimux prepares
// its files (the image cache entry) before PullImage returns, so the VM's
// CreateContainer takes well under crictl's default 2 s timeout (≤ 1 s)
// whatever the image's size: prepared at the first create instead, the
// 380 MB Debian image misses that timeout. An image crimux did not pull
// (pulled straight from containerd) still works: it is prepared at create.
func TestPullPreparesTheVMDisk(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	if got := cacheEntries(t, c); len(got) != 1 {
		t.Fatalf("after crictl pull through crimux the image cache holds %v, want the image's entry", got)
	}
	pod := vmPodJSON(t, "vm-pullprep", testCgroupParent(t), "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.crictlCmd(ctx, nil, "create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod); err != nil { // crictl's default timeout
		t.Fatalf("crictl create with its default timeout: %v\n%s", err, out)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("CreateContainer of a pulled VM image took %v, want ≤ 1s", took)
	} else {
		t.Logf("CreateContainer of the pulled VM image: %v", took.Round(time.Millisecond))
	}

	// Behind crimux's back: a crimux of a new state dir that never pulled.
	d := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	if got := cacheEntries(t, d); len(got) != 0 {
		t.Fatalf("a new crimux's cache holds %v", got)
	}
	pod2 := vmPodJSON(t, "vm-pullprep-2", testCgroupParent(t), "")
	pod2ID := d.crictl("runp", "--runtime", "vm", pod2)
	t.Cleanup(func() { d.crictlErr("rmp", "-f", pod2ID) })
	ctr := d.crictl("create", pod2ID, vmContainerJSON(t, vmImage, vmMemory, ""), pod2)
	d.crictl("start", ctr)
	if got := cacheEntries(t, d); len(got) != 1 {
		t.Fatalf("an image crimux did not pull: cache %v after create, want its entry", got)
	}
}
