package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/internal/testutil"
)

// TestVMImageCacheCollected: the files crimux extracts from a VM image
// (its cache entry under <state>/images) are counted by crictl
// imagefsinfo while they exist; once the image's last VM is gone, crictl
// rmi removes the entry at once (RemoveImage collects the cache). An
// image removed while a VM still runs from it keeps its entry until the
// VM is gone, then loses it in the collector's next pass.
func TestVMImageCacheCollected(t *testing.T) {
	parallel(t)
	requireVM(t)
	image, manifest := ownVMImage(t)
	// The collector passes every 5 s here (a minute by default): the last
	// step waits for a pass.
	cfg := writeJSON(t, "crimux.toml", "[libvirt]\ngc_interval = \"5s\"\n")
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", cfg)
	t.Cleanup(func() { c.crictlErr("rmi", image) })
	entry := filepath.Join(c.stateDir, "images", manifest.Algorithm().String()+"-"+manifest.Encoded())

	// The last VM goes first, then the image: the entry goes with the rmi.
	c.crictl("pull", image)
	podID := runVMFrom(t, c, image, "vm-imagegc")
	size := entrySize(t, entry)
	testutil.Eventually(t, within(t, 30*time.Second), "crictl imagefsinfo counting the image cache", func() error {
		return imageFsCounts(t, c, size)
	})
	c.crictl("rmp", "-f", podID)
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("cache entry %s gone with the pod, while its image is still there: %v", entry, err)
	}
	c.crictl("rmi", image)
	if _, err := os.Stat(entry); !os.IsNotExist(err) {
		t.Fatalf("cache entry %s still there after crictl rmi of its last image (%v); crimux logs:\n%s", entry, err, c.logs)
	}

	// The image goes while a VM runs from it: the entry stays until the
	// VM is gone, then the collector's next pass removes it.
	c.crictl("pull", image)
	podID = runVMFrom(t, c, image, "vm-imagegc-2")
	c.crictl("rmi", image)
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("cache entry %s removed by crictl rmi while a VM runs from it: %v", entry, err)
	}
	c.crictl("rmp", "-f", podID)
	testutil.Eventually(t, within(t, 90*time.Second), "cache entry removed by the collector", func() error {
		if _, err := os.Stat(entry); !os.IsNotExist(err) {
			return fmt.Errorf("%s still there (%v)", entry, err)
		}
		return nil
	})
}

// runVMFrom runs a VM pod named name from image (runp, create, start) and
// returns its ID; the pod is removed at cleanup.
func runVMFrom(t *testing.T, c *crimux, image, name string) string {
	t.Helper()
	pod := vmPodJSON(t, name, testCgroupParent(t), "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, image, vmMemory, ""), pod)
	c.crictl("start", ctrID)
	return podID
}

// entrySize is what a cache entry takes on disk; it fails the test if
// the entry is missing.
func entrySize(t *testing.T, entry string) uint64 {
	t.Helper()
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("no cache entry for the VM's image: %v", err)
	}
	u, err := fsusage.Measure(context.Background(), entry)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache entry %s: %d bytes on disk", filepath.Base(entry), u.Bytes)
	return u.Bytes
}

// imageFsCounts checks that crimux's crictl imagefsinfo counts at least
// size bytes of crimux's own files: beyond what containerd reports for
// the same image filesystem (crimux's state dir on containerd's
// filesystem), or in an image filesystem of its own (the state dir
// elsewhere).
func imageFsCounts(t *testing.T, c *crimux, size uint64) error {
	ours := imageFilesystems(t, c)
	for _, fs := range ours {
		if fs.mount == c.stateDir {
			if fs.used < size {
				return fmt.Errorf("the state dir's image filesystem counts %d bytes, less than the cache entry's %d", fs.used, size)
			}
			return nil
		}
	}
	theirs := imageFilesystems(t, &crimux{t: t, endpoint: bed.containerd})
	if len(ours) == 0 || len(theirs) == 0 || ours[0].mount != theirs[0].mount {
		return fmt.Errorf("image filesystems through crimux %+v, of containerd %+v: want the same first one", ours, theirs)
	}
	if extra := int64(ours[0].used) - int64(theirs[0].used); extra < int64(size) {
		return fmt.Errorf("crimux counts %d bytes more than containerd on %s, less than the cache entry's %d", extra, ours[0].mount, size)
	}
	return nil
}

type imageFs struct {
	mount string
	used  uint64
}

// imageFilesystems runs crictl imagefsinfo against c's endpoint.
func imageFilesystems(t *testing.T, c *crimux) []imageFs {
	t.Helper()
	var out struct {
		Status struct {
			ImageFilesystems []struct {
				FsID      struct{ Mountpoint string }     `json:"fsId"`
				UsedBytes struct{ Value json.RawMessage } `json:"usedBytes"`
			} `json:"imageFilesystems"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("imagefsinfo", "-o", "json"), &out)
	var fss []imageFs
	for _, fs := range out.Status.ImageFilesystems {
		used, err := strconv.ParseUint(strings.Trim(string(fs.UsedBytes.Value), `"`), 10, 64)
		if err != nil {
			t.Fatalf("imagefsinfo: used bytes %s: %v", fs.UsedBytes.Value, err)
		}
		fss = append(fss, imageFs{mount: fs.FsID.Mountpoint, used: used})
	}
	return fss
}

// ownVMImage publishes a copy of the busybox VM image as a repository of
// this test's own in the bed's registry, which serves the OCI layouts
// under <testbed>/images and rereads them on every request: the same
// layers, a config with one more label, so an image ID and a manifest of
// its own. crictl rmi removes every name of an image ID, so removing a
// shared image could pull it from under another test. It returns the
// image's reference and its manifest digest (which keys its cache entry).
func ownVMImage(t *testing.T) (string, digest.Digest) {
	t.Helper()
	root := filepath.Join(bed.testbed, "images")
	src := filepath.Join(root, "crimux", "vm-busybox")
	name := fmt.Sprintf("crimux/e2e-imagegc-%d", time.Now().UnixNano())
	dst := filepath.Join(root, filepath.FromSlash(name))
	t.Cleanup(func() { os.RemoveAll(dst) })
	if err := os.MkdirAll(filepath.Join(dst, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	readLayoutBlob(t, src, layoutManifest(t, src), &m)
	var cfg ocispec.Image
	readLayoutBlob(t, src, m.Config, &cfg)
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	cfg.Config.Labels["crimux.io/e2e-image"] = name
	m.Config = writeLayoutBlob(t, dst, m.Config.MediaType, cfg)
	for _, l := range m.Layers {
		linkLayoutBlob(t, src, dst, l.Digest)
	}
	md := writeLayoutBlob(t, dst, ocispec.MediaTypeImageManifest, m)
	md.Annotations = map[string]string{ocispec.AnnotationRefName: "latest"}
	writeLayoutFile(t, filepath.Join(dst, ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"1.0.0"}`))
	idx, _ := json.Marshal(ocispec.Index{Versioned: m.Versioned, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{md}})
	writeLayoutFile(t, filepath.Join(dst, "index.json"), idx) // last: the registry serves it from now on
	return "127.0.0.1:5117/" + name + ":latest", md.Digest
}

// layoutManifest follows the layout's "latest" down its indexes to the
// linux/amd64 manifest.
func layoutManifest(t *testing.T, layout string) ocispec.Descriptor {
	t.Helper()
	var idx ocispec.Index
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	mustJSON(t, string(b), &idx)
	for depth := 0; depth < 4; depth++ {
		var next *ocispec.Descriptor
		for i, d := range idx.Manifests {
			if d.Annotations[ocispec.AnnotationRefName] == "latest" || d.Platform != nil && d.Platform.Architecture == "amd64" || len(idx.Manifests) == 1 {
				next = &idx.Manifests[i]
				break
			}
		}
		switch {
		case next == nil:
			t.Fatalf("%s: no linux/amd64 manifest under latest", layout)
		case next.MediaType == ocispec.MediaTypeImageManifest:
			return *next
		}
		idx = ocispec.Index{}
		readLayoutBlob(t, layout, *next, &idx)
	}
	t.Fatalf("%s: indexes nested too deep", layout)
	return ocispec.Descriptor{}
}

func layoutBlobPath(layout string, d digest.Digest) string {
	return filepath.Join(layout, "blobs", d.Algorithm().String(), d.Encoded())
}

func readLayoutBlob(t *testing.T, layout string, desc ocispec.Descriptor, v any) {
	t.Helper()
	b, err := os.ReadFile(layoutBlobPath(layout, desc.Digest))
	if err != nil {
		t.Fatal(err)
	}
	mustJSON(t, string(b), v)
}

// writeLayoutBlob stores v as JSON and returns its descriptor.
func writeLayoutBlob(t *testing.T, layout, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromBytes(b)
	writeLayoutFile(t, layoutBlobPath(layout, d), b)
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

// linkLayoutBlob gives layout dst the blob d of src: a hard link, or a copy.
func linkLayoutBlob(t *testing.T, src, dst string, d digest.Digest) {
	t.Helper()
	if os.Link(layoutBlobPath(src, d), layoutBlobPath(dst, d)) == nil {
		return
	}
	in, err := os.Open(layoutBlobPath(src, d))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(layoutBlobPath(dst, d))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeLayoutFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
