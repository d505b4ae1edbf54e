package oci

import "encoding/json"

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	// MediaTypeLayerGzip is the media type of every layer blob.
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"

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

func (b Blob) descriptor() descriptor {
	return descriptor{MediaType: b.MediaType, Digest: b.Digest, Size: int64(len(b.Data))}
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

// ContainerConfig is the "config" of an image config: how its containers
// run by default.
type ContainerConfig struct {
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
	Config       ContainerConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history,omitempty"`
}

// Image is one built image: its config, manifest and, when it is served as
// a multi-platform image, the index that wraps the manifest.
type Image struct {
	Config   Blob
	manifest Blob
	index    *Blob
	layers   []Layer
}

// Root is what a tag points at: the index when there is one.
func (b Image) Root() Blob {
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

// SpecLayer is a layer of an image spec with the history entry that says
// what made it.
type SpecLayer struct {
	Layer     Layer
	CreatedBy string
}

// ImageSpec is an image to build.
type ImageSpec struct {
	ID            string   // unique; becomes a label, so every image has its own ID
	Refs          []string // repository:tag, repository without registry host
	Layers        []SpecLayer
	Config        ContainerConfig
	MultiPlatform bool // serve an index (like upstream) rather than a bare manifest
}

// Build makes the image's config, manifest and (for a multi-platform
// image) index.
func Build(spec ImageSpec) Image {
	created := Epoch.Format("2006-01-02T15:04:05Z")
	cfg := imageConfig{Created: created, Architecture: "amd64", OS: "linux", Config: spec.Config}
	cfg.Config.Labels = map[string]string{annotationTitle: spec.ID}
	for k, v := range spec.Config.Labels {
		cfg.Config.Labels[k] = v
	}
	cfg.RootFS.Type = "layers"
	for _, l := range spec.Layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.Layer.DiffID)
		cfg.History = append(cfg.History, history{Created: created, CreatedBy: l.CreatedBy})
	}
	img := Image{Config: NewBlob(mediaTypeConfig, marshal(cfg))}

	m := manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: img.Config.descriptor(), Layers: []descriptor{}}
	for _, l := range spec.Layers {
		m.Layers = append(m.Layers, l.Layer.descriptor())
		img.layers = append(img.layers, l.Layer)
	}
	img.manifest = NewBlob(mediaTypeManifest, marshal(m))

	if spec.MultiPlatform {
		d := img.manifest.descriptor()
		d.Platform = &platform{Architecture: "amd64", OS: "linux"}
		idx := NewBlob(mediaTypeIndex, marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{d}}))
		img.index = &idx
	}
	return img
}
