// Package bigimage makes the bench's large VM image: a containerDisk whose
// one gzip layer holds disk/disk.img, a raw disk of DiskSize bytes of real
// data (the host's /usr/lib and /usr/share files, concatenated in lexical
// order, repeated if they run out), so that its compression ratio and its
// decompression cost are those of a real disk, not of zeros. The image is
// written as an OCI layout under the test bed registry's root, which
// serves it without a restart, and kept there: it takes half a minute to
// make, and Ensure makes it only when it is absent.
package bigimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/gzip"
)

const (
	// Repository is the image's repository in the registry; Ref its
	// reference there.
	Repository = "crimux/vm-big"
	Ref        = "127.0.0.1:5117/" + Repository + ":latest"
	// DiskSize is the raw disk's size: 1 GiB.
	DiskSize = 1 << 30
	// version names the recipe; a layout made by another is made again.
	version = "crimux-bench-bigimage-v1"
)

// sources are the trees whose files fill the disk.
var sources = []string{"/usr/lib", "/usr/share"}

// Ensure returns the image's OCI layout under imagesDir (the registry's
// root), making it first if it is absent or made by another recipe.
func Ensure(imagesDir string) (string, error) {
	layout := filepath.Join(imagesDir, Repository)
	if b, err := os.ReadFile(filepath.Join(layout, "recipe")); err == nil && string(b) == version {
		return layout, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(layout), ".vm-big-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := write(tmp, DiskSize); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.RemoveAll(layout); err != nil {
		return "", err
	}
	return layout, os.Rename(tmp, layout)
}

// write writes the whole layout into dir, with a disk of size bytes.
func write(dir string, size int64) error {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	layer, diffID, err := writeLayer(blobs, size)
	if err != nil {
		return err
	}
	config, err := writeJSON(blobs, map[string]any{
		"architecture": "amd64", "os": "linux", "config": map[string]any{},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{"created_by": "crimux bench: a 1 GiB raw disk of the host's /usr files"}},
	})
	if err != nil {
		return err
	}
	manifest, err := writeJSON(blobs, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": config.as("application/vnd.oci.image.config.v1+json"),
		"layers": []any{layer.as("application/vnd.oci.image.layer.v1.tar+gzip")},
	})
	if err != nil {
		return err
	}
	m := manifest.as("application/vnd.oci.image.manifest.v1+json")
	m["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "latest"}
	m["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{m}})
	for name, data := range map[string][]byte{
		"index.json": index, "oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "recipe": []byte(version),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// blob is a written blob's digest and size.
type blob struct {
	digest string
	size   int64
}

func (b blob) as(mediaType string) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": b.digest, "size": b.size}
}

// writeJSON writes v as a blob.
func writeJSON(blobs string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	return blob{"sha256:" + hexSum, int64(len(data))}, os.WriteFile(filepath.Join(blobs, hexSum), data, 0o644)
}

// writeLayer streams the layer (tar, gzip) into a blob, hashing the
// compressed bytes (its digest) and the tar (its diff ID) on the way.
func writeLayer(blobs string, size int64) (blob, string, error) {
	f, err := os.CreateTemp(blobs, "layer-")
	if err != nil {
		return blob{}, "", err
	}
	defer f.Close()
	gzSum, tarSum := sha256.New(), sha256.New()
	counted := &counter{w: io.MultiWriter(f, gzSum)}
	gz := gzip.NewWriter(counted)
	tw := tar.NewWriter(io.MultiWriter(gz, tarSum))
	if err := writeTar(tw, size); err != nil {
		return blob{}, "", err
	}
	if err := errors.Join(tw.Close(), gz.Close(), f.Sync()); err != nil {
		return blob{}, "", err
	}
	hexSum := hex.EncodeToString(gzSum.Sum(nil))
	if err := os.Rename(f.Name(), filepath.Join(blobs, hexSum)); err != nil {
		return blob{}, "", err
	}
	return blob{"sha256:" + hexSum, counted.n}, "sha256:" + hex.EncodeToString(tarSum.Sum(nil)), nil
}

// writeTar writes disk/ and disk/disk.img, of size bytes.
func writeTar(tw *tar.Writer, size int64) error {
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "disk/", Mode: 0o755, ModTime: mtime}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "disk/disk.img", Mode: 0o644, Size: size, ModTime: mtime}); err != nil {
		return err
	}
	return fill(tw, size)
}

// fill writes n bytes of the sources' files to w.
func fill(w io.Writer, n int64) error {
	left := n
	for left > 0 {
		before := left
		for _, root := range sources {
			err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return nil // unreadable or not a file: skipped
				}
				return copyFile(w, path, &left)
			})
			if errors.Is(err, errFull) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		if left == before {
			return fmt.Errorf("no readable files under %v", sources)
		}
	}
	return nil
}

// errFull stops the walk once the disk is full.
var errFull = errors.New("full")

// copyFile copies path to w, at most *left bytes, and counts them off.
func copyFile(w io.Writer, path string, left *int64) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, *left))
	*left -= n
	if err != nil {
		return err
	}
	if *left == 0 {
		return errFull
	}
	return nil
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
