package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	mediaTypeIndex     = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest  = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig    = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"

	annotationRefName = "org.opencontainers.image.ref.name"
	annotationTitle   = "org.opencontainers.image.title"
)

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func (b blob) descriptor() descriptor {
	return descriptor{MediaType: b.mediaType, Digest: b.digest, Size: int64(len(b.data))}
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type containerConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
	StopSignal   string              `json:"StopSignal,omitempty"`
}

type history struct {
	Created    string `json:"created"`
	CreatedBy  string `json:"created_by"`
	EmptyLayer bool   `json:"empty_layer,omitempty"`
}

type imageConfig struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history,omitempty"`
}

// builtImage is one image: its config, manifest and, when it is served as a
// multi-platform image, the index that wraps the manifest.
type builtImage struct {
	config   blob
	manifest blob
	index    *blob
	layers   []layer
}

// root is what a tag points at: the index when there is one.
func (b builtImage) root() blob {
	if b.index != nil {
		return *b.index
	}
	return b.manifest
}

func marshal(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

func buildImage(spec imageSpec) builtImage {
	created := epoch.Format("2006-01-02T15:04:05Z")
	cfg := imageConfig{Created: created, Architecture: "amd64", OS: "linux", Config: spec.config}
	cfg.Config.Labels = map[string]string{annotationTitle: spec.id}
	for k, v := range spec.config.Labels {
		cfg.Config.Labels[k] = v
	}
	cfg.RootFS.Type = "layers"
	for _, l := range spec.layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.layer.diffID)
		cfg.History = append(cfg.History, history{Created: created, CreatedBy: l.createdBy})
	}
	img := builtImage{config: newBlob(mediaTypeConfig, marshal(cfg))}

	m := manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: img.config.descriptor(), Layers: []descriptor{}}
	for _, l := range spec.layers {
		m.Layers = append(m.Layers, l.layer.descriptor())
		img.layers = append(img.layers, l.layer)
	}
	img.manifest = newBlob(mediaTypeManifest, marshal(m))

	if spec.multiPlatform {
		d := img.manifest.descriptor()
		d.Platform = &platform{Architecture: "amd64", OS: "linux"}
		idx := newBlob(mediaTypeIndex, marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{d}}))
		img.index = &idx
	}
	return img
}

// layoutWriter writes one OCI image layout per repository under root
// (root/<repository>/{oci-layout,index.json,blobs/sha256/...}). A blob that
// several layouts share is written once and hard-linked.
type layoutWriter struct {
	root    string
	written map[string]string // digest -> first path
	tags    map[string][]descriptor
}

func (w *layoutWriter) putBlob(repo string, b blob) error {
	hexDigest := strings.TrimPrefix(b.digest, "sha256:")
	dst := filepath.Join(w.root, filepath.FromSlash(repo), "blobs", "sha256", hexDigest)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if first, ok := w.written[b.digest]; ok {
		if err := os.Link(first, dst); err == nil {
			return nil
		}
	}
	if err := os.WriteFile(dst, b.data, 0o644); err != nil {
		return err
	}
	w.written[b.digest] = dst
	return nil
}

func (w *layoutWriter) add(ref string, img builtImage) error {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || repo == "" || tag == "" {
		return fmt.Errorf("reference %q is not repository:tag", ref)
	}
	blobs := []blob{img.config, img.manifest}
	for _, l := range img.layers {
		blobs = append(blobs, l.blob)
	}
	if img.index != nil {
		blobs = append(blobs, *img.index)
	}
	for _, b := range blobs {
		if err := w.putBlob(repo, b); err != nil {
			return err
		}
	}
	d := img.root().descriptor()
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

func (w *layoutWriter) finish() error {
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
