package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LayoutWriter writes one OCI image layout per repository under root
// (root/<repository>/{oci-layout,index.json,blobs/sha256/...}). A blob that
// several layouts share is written once and hard-linked.
type LayoutWriter struct {
	root    string
	written map[string]string // digest -> first path
	tags    map[string][]descriptor
}

// NewLayoutWriter writes layouts under root.
func NewLayoutWriter(root string) *LayoutWriter {
	return &LayoutWriter{root: root, written: map[string]string{}, tags: map[string][]descriptor{}}
}

func (w *LayoutWriter) putBlob(repo string, b Blob) error {
	hexDigest := strings.TrimPrefix(b.Digest, "sha256:")
	dst := filepath.Join(w.root, filepath.FromSlash(repo), "blobs", "sha256", hexDigest)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if first, ok := w.written[b.Digest]; ok {
		if err := os.Link(first, dst); err == nil {
			return nil
		}
	}
	if err := os.WriteFile(dst, b.Data, 0o644); err != nil {
		return err
	}
	w.written[b.Digest] = dst
	return nil
}

// Add adds img to the layout of ref's repository, tagged with ref's tag.
func (w *LayoutWriter) Add(ref string, img Image) error {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || repo == "" || tag == "" {
		return fmt.Errorf("reference %q is not repository:tag", ref)
	}
	blobs := []Blob{img.Config, img.manifest}
	for _, l := range img.layers {
		blobs = append(blobs, l.Blob)
	}
	if img.index != nil {
		blobs = append(blobs, *img.index)
	}
	for _, b := range blobs {
		if err := w.putBlob(repo, b); err != nil {
			return err
		}
	}
	d := img.Root().descriptor()
	if img.index == nil {
		d.Platform = &platform{Architecture: "amd64", OS: "linux"}
	}
	d.Annotations = map[string]string{annotationRefName: tag}
	for _, existing := range w.tags[repo] {
		if existing.Annotations[annotationRefName] == tag {
			return fmt.Errorf("tag %s defined twice", ref)
		}
	}
	w.tags[repo] = append(w.tags[repo], d)
	return nil
}

// Finish writes every layout's oci-layout and index.json.
func (w *LayoutWriter) Finish() error {
	if len(w.tags) == 0 {
		return errors.New("no images")
	}
	for repo, descs := range w.tags {
		sort.Slice(descs, func(i, j int) bool {
			return descs[i].Annotations[annotationRefName] < descs[j].Annotations[annotationRefName]
		})
		dir := filepath.Join(w.root, filepath.FromSlash(repo))
		if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
			return err
		}
		idx := index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: descs}
		if err := os.WriteFile(filepath.Join(dir, "index.json"), marshal(idx), 0o644); err != nil {
			return err
		}
	}
	return nil
}
