package main

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

// epoch is the modification time of every file in every layer, so that
// layers (and so image digests) depend only on their contents.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type entry struct {
	name     string // relative, no leading slash
	typeflag byte
	mode     int64
	data     []byte
	linkname string
}

// layerBuilder collects the files of one layer and writes them as a
// deterministic tar: directories first, then regular files and symlinks,
// then hard links, each group sorted by name (a hard link's target must
// come before the link).
type layerBuilder struct {
	entries map[string]entry
}

func newLayer() *layerBuilder { return &layerBuilder{entries: map[string]entry{}} }

func clean(name string) string {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" || name == "." {
		panic("empty layer path")
	}
	return name
}

// dir adds a directory and any missing parents (parents get 0755).
func (l *layerBuilder) dir(name string, mode int64) {
	name = clean(name)
	if parent := path.Dir(name); parent != "." {
		if _, ok := l.entries[parent]; !ok {
			l.dir(parent, 0o755)
		}
	}
	l.entries[name] = entry{name: name, typeflag: tar.TypeDir, mode: mode}
}

func (l *layerBuilder) parents(name string) {
	if parent := path.Dir(name); parent != "." {
		if _, ok := l.entries[parent]; !ok {
			l.dir(parent, 0o755)
		}
	}
}

func (l *layerBuilder) file(name string, mode int64, data []byte) {
	name = clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeReg, mode: mode, data: data}
}

func (l *layerBuilder) symlink(name, target string) {
	name = clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeSymlink, mode: 0o777, linkname: target}
}

func (l *layerBuilder) hardlink(name, target string) {
	name = clean(name)
	l.parents(name)
	l.entries[name] = entry{name: name, typeflag: tar.TypeLink, mode: 0o755, linkname: clean(target)}
}

type blob struct {
	mediaType string
	digest    string
	data      []byte
}

func newBlob(mediaType string, data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{mediaType: mediaType, digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// layer is a built layer: its gzip blob and the digest of the plain tar.
type layer struct {
	blob
	diffID string
}

func (l *layerBuilder) build() (layer, error) {
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

	var plain bytes.Buffer
	tw := tar.NewWriter(&plain)
	for _, e := range list {
		hdr := &tar.Header{
			Typeflag: e.typeflag,
			Name:     e.name,
			Linkname: e.linkname,
			Mode:     e.mode,
			ModTime:  epoch,
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
			return layer{}, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if e.typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return layer{}, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}
	diff := sha256.Sum256(plain.Bytes())

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return layer{}, err
	}
	if _, err := zw.Write(plain.Bytes()); err != nil {
		return layer{}, err
	}
	if err := zw.Close(); err != nil {
		return layer{}, err
	}
	return layer{
		blob:   newBlob(mediaTypeLayerGzip, gz.Bytes()),
		diffID: "sha256:" + hex.EncodeToString(diff[:]),
	}, nil
}
