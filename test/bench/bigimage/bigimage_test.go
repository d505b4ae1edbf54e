package bigimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayoutHoldsTheDiskOfTheSourcesFiles makes a small image from two
// files and reads it back as a registry client would: index → manifest →
// layer, digests checked, the disk the files' bytes repeated.
func TestLayoutHoldsTheDiskOfTheSourcesFiles(t *testing.T) {
	src := t.TempDir()
	for name, data := range map[string]string{"a": "0123456789", "b/c": "abcdef"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defer func(s []string) { sources = s }(sources)
	sources = []string{src}
	dir := t.TempDir()
	if err := write(dir, 40); err != nil {
		t.Fatal(err)
	}
	var index struct{ Manifests []struct{ Digest string } }
	readJSON(t, filepath.Join(dir, "index.json"), &index)
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct {
			Digest string
			Size   int64
		}
	}
	readJSON(t, blobPath(t, dir, index.Manifests[0].Digest), &manifest)
	var config struct {
		Rootfs struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	readJSON(t, blobPath(t, dir, manifest.Config.Digest), &config)
	layer, err := os.ReadFile(blobPath(t, dir, manifest.Layers[0].Digest))
	if err != nil || int64(len(layer)) != manifest.Layers[0].Size {
		t.Fatalf("layer: %d bytes (%v), manifest says %d", len(layer), err, manifest.Layers[0].Size)
	}
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tarBytes, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + sum(tarBytes); got != config.Rootfs.DiffIDs[0] {
		t.Fatalf("diff ID %s, the tar's digest %s", config.Rootfs.DiffIDs[0], got)
	}
	tr := tar.NewReader(bytes.NewReader(tarBytes))
	var disk []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "disk/disk.img" {
			disk, _ = io.ReadAll(tr)
		}
	}
	want := strings.Repeat("0123456789abcdef", 3)[:40]
	if string(disk) != want {
		t.Fatalf("disk.img = %q, want %q", disk, want)
	}
}

func TestEnsureKeepsALayoutOfItsRecipe(t *testing.T) {
	images := t.TempDir()
	layout := filepath.Join(images, Repository)
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, "recipe"), []byte(version), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Ensure(images) // would take half a minute if it made one
	if err != nil || got != layout {
		t.Fatalf("Ensure = %s, %v; want the existing %s", got, err, layout)
	}
}

func blobPath(t *testing.T, dir, digest string) string {
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q", digest)
	}
	p := filepath.Join(dir, "blobs", "sha256", hexSum)
	data, err := os.ReadFile(p)
	if err != nil || sum(data) != hexSum {
		t.Fatalf("blob %s: %v, or its content does not match its name", digest, err)
	}
	return p
}

func readJSON(t *testing.T, path string, v any) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
