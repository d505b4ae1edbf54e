// Package oci owns the deterministic OCI side of the test bed's images:
// layers built as reproducible tars, image configs, manifests and indexes
// made from an image spec, and OCI image layouts written one per
// repository. The same inputs give the same bytes, so the same digests.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// Epoch is the modification time of every file in every layer, so that
// layers (and so image digests) depend only on their contents.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type entry struct {
	name     string // relative, no leading slash
	typeflag byte
	mode     int64
	data     []byte
	linkname string
}

// LayerBuilder collects the files of one layer and writes them as a
// deterministic tar: directories first, then regular files and symlinks,
// then hard links, each group sorted by name (a hard link's target must
// come before the link).
type LayerBuilder struct {
	entries map[string]entry
}

// NewLayer starts an empty layer.
func NewLayer() *LayerBuilder { return &LayerBuilder{entries: map[string]entry{}} }

// Clean makes name a relative path without a leading slash; it panics on
// an empty one.
func Clean(name string) string {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" || name == "." {
		panic("empty layer path")
	}
	return name
}

// Dir adds a directory and any missing parents (parents get 0755).
func (l *LayerBuilder) Dir(name string, mode int64) {
	name = Clean(name)
	if parent := path.Dir(name); parent != "." {
		if _, ok := l.entries[parent]; !ok {
			l.Dir(parent, 0o755)
		}
	}
	l.entries[name] = entry{name: name, typeflag: tar.TypeDir, mode: mode}
}

func (l *LayerBuilder) parents(name string) {
	if parent := path.Dir(name); parent != "." {
		if _, ok := l.entries[parent]; !ok {
			l.Dir(parent, 0o755)
		}
	}
}

// File adds a regular file.
func (l *LayerBuilder) File(name string, mode int64, data []byte) {
	name = Clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeReg, mode: mode, data: data}
}

// Symlink adds a symbolic link to target.
func (l *LayerBuilder) Symlink(name, target string) {
	name = Clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeSymlink, mode: 0o777, linkname: target}
}

// Hardlink adds a hard link to the layer's file target.
func (l *LayerBuilder) Hardlink(name, target string) {
	name = Clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeLink, mode: 0o755, linkname: Clean(target)}
}

// Has tells whether the layer has an entry named name (as added: clean).
func (l *LayerBuilder) Has(name string) bool {
	_, ok := l.entries[name]
	return ok
}

// Blob is content addressed by its digest.
type Blob struct {
	MediaType string
	Digest    string
	Data      []byte
}

// NewBlob is data with its media type and SHA-256 digest.
func NewBlob(mediaType string, data []byte) Blob {
	sum := sha256.Sum256(data)
	return Blob{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Data: data}
}

// Layer is a built layer: its gzip blob and the digest of the plain tar.
type Layer struct {
	Blob
	DiffID string
}

// Build writes the layer: the tar, gzip-compressed.
func (l *LayerBuilder) Build() (Layer, error) {
	plain, err := writeTar(l.sorted())
	if err != nil {
		return Layer{}, err
	}
	diff := sha256.Sum256(plain)
	gz, err := gzipBest(plain)
	if err != nil {
		return Layer{}, err
	}
	return Layer{
		Blob:   NewBlob(MediaTypeLayerGzip, gz),
		DiffID: "sha256:" + hex.EncodeToString(diff[:]),
	}, nil
}

// sorted is the layer's entries in tar order: directories, then regular
// files and symlinks, then hard links, each group sorted by name.
func (l *LayerBuilder) sorted() []entry {
	group := func(e entry) int {
		switch e.typeflag {
		case tar.TypeDir:
			return 0
		case tar.TypeLink:
			return 2
		default:
			return 1
		}
	}
	list := make([]entry, 0, len(l.entries))
	for _, e := range l.entries {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool {
		gi, gj := group(list[i]), group(list[j])
		if gi != gj {
			return gi < gj
		}
		return list[i].name < list[j].name
	})
	return list
}

// writeTar is the plain tar of list, every entry owned by root and dated
// Epoch.
func writeTar(list []entry) ([]byte, error) {
	var plain bytes.Buffer
	tw := tar.NewWriter(&plain)
	for _, e := range list {
		hdr := &tar.Header{
			Typeflag: e.typeflag,
			Name:     e.name,
			Linkname: e.linkname,
			Mode:     e.mode,
			ModTime:  Epoch,
			Uname:    "root",
			Gname:    "root",
			Format:   tar.FormatPAX,
		}
		switch e.typeflag {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if e.typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return plain.Bytes(), nil
}

// gzipBest compresses data at gzip's best compression.
func gzipBest(data []byte) ([]byte, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}
