package vmimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// entry is one tar header of a test layer.
type entry struct {
	name string
	typ  byte
	body []byte
	link string
}

func file(name string, body []byte) entry    { return entry{name: name, typ: tar.TypeReg, body: body} }
func text(name, body string) entry           { return file(name, []byte(body)) }
func dir(name string) entry                  { return entry{name: name, typ: tar.TypeDir} }
func symlink(name, target string) entry      { return entry{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) entry     { return entry{name: name, typ: tar.TypeLink, link: target} }
func device(name string) entry               { return entry{name: name, typ: tar.TypeBlock} }
func whiteout(dir, name string) entry        { return text(dir+"/"+whiteoutPrefix+name, "") }
func opaque(dir string) entry                { return text(dir+"/"+whiteoutOpaque, "") }
func layer(t testing.TB, es ...entry) []byte { return tarLayer(t, es...) }

func tarLayer(t testing.TB, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Format: tar.FormatPAX}
		if e.typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatalf("tar body %q: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// memLayers opens in-memory uncompressed tar layers.
func memLayers(layers [][]byte) openLayer {
	return func(ctx context.Context, i int) (io.ReadCloser, error) {
		return io.NopCloser(guardedReader{ctx: ctx, r: bytes.NewReader(layers[i])}), nil
	}
}

// qcow2Image builds a minimal, valid qcow2 v3 file by hand: 64 KiB
// clusters, header, refcount table at cluster 1, refcount block at cluster
// 2, L1 table at cluster 3. mutate edits the header before it is written.
func qcow2Image(mutate func(b []byte)) []byte { return qcow2ImageBits(16, mutate) }

// qcow2ImageBits is qcow2Image with 1<<bits byte clusters.
func qcow2ImageBits(bits uint32, mutate func(b []byte)) []byte {
	cluster := 1 << bits
	b := make([]byte, 4*cluster)
	be := binary.BigEndian
	copy(b, qcow2Magic)
	be.PutUint32(b[4:], 3)
	be.PutUint32(b[20:], bits)              // cluster_bits
	be.PutUint64(b[24:], 1<<20)             // virtual size
	be.PutUint32(b[36:], 1)                 // l1_size
	be.PutUint64(b[40:], uint64(3*cluster)) // l1_table_offset
	be.PutUint64(b[48:], uint64(cluster))   // refcount_table_offset
	be.PutUint32(b[56:], 1)                 // refcount_table_clusters
	be.PutUint32(b[96:], 4)                 // refcount_order
	be.PutUint32(b[100:], 112)              // header_length
	be.PutUint64(b[cluster:], uint64(2*cluster))
	for i := range 4 {
		be.PutUint16(b[2*cluster+2*i:], 1)
	}
	if mutate != nil {
		mutate(b)
	}
	return b
}

// putExt writes a header extension at off and returns the next offset.
func putExt(b []byte, off int, typ uint32, data []byte) int {
	binary.BigEndian.PutUint32(b[off:], typ)
	binary.BigEndian.PutUint32(b[off+4:], uint32(len(data)))
	copy(b[off+8:], data)
	return off + 8 + (len(data)+7)&^7
}

// testImage is an OCI image built in memory: blobs by digest and the
// descriptor of its top (a manifest, or an index over several).
type testImage struct {
	blobs    map[digest.Digest][]byte
	top      ocispec.Descriptor
	manifest digest.Digest // the linux/amd64 one
	config   digest.Digest // its config: the image ID
}

type compression int

const (
	gzipped compression = iota
	zstded
	plain
)

func (im *testImage) add(mediaType string, b []byte) ocispec.Descriptor {
	d := digest.FromBytes(b)
	im.blobs[d] = b
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func compress(t testing.TB, c compression, b []byte) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	switch c {
	case gzipped:
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes(), ocispec.MediaTypeImageLayerGzip
	case zstded:
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(b)
		zw.Close()
		return buf.Bytes(), ocispec.MediaTypeImageLayerZstd
	}
	return b, ocispec.MediaTypeImageLayer
}

// addManifest adds a manifest of layers (uncompressed tars) for arch.
func (im *testImage) addManifest(t testing.TB, arch string, c compression, labels map[string]string, layers ...[]byte) ocispec.Descriptor {
	t.Helper()
	cfg := ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: arch}}
	cfg.Config.Labels = labels
	cfg.RootFS.Type = "layers"
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest}
	m.SchemaVersion = 2
	for _, l := range layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, digest.FromBytes(l))
		zb, mt := compress(t, c, l)
		m.Layers = append(m.Layers, im.add(mt, zb))
	}
	cb, _ := json.Marshal(cfg)
	m.Config = im.add(ocispec.MediaTypeImageConfig, cb)
	mb, _ := json.Marshal(m)
	desc := im.add(ocispec.MediaTypeImageManifest, mb)
	desc.Platform = &ocispec.Platform{OS: "linux", Architecture: arch}
	if arch == "amd64" {
		im.manifest, im.config = desc.Digest, m.Config.Digest
	}
	return desc
}

// newTestImage is a single-manifest linux/amd64 image.
func newTestImage(t testing.TB, c compression, labels map[string]string, layers ...[]byte) *testImage {
	im := &testImage{blobs: map[digest.Digest][]byte{}}
	im.top = im.addManifest(t, "amd64", c, labels, layers...)
	im.top.Platform = nil
	return im
}

// newIndexImage is an index over the given manifests (added with
// addManifest through build).
func newIndexImage(t testing.TB, build func(im *testImage) []ocispec.Descriptor) *testImage {
	im := &testImage{blobs: map[digest.Digest][]byte{}}
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: build(im)}
	idx.SchemaVersion = 2
	b, _ := json.Marshal(idx)
	im.top = im.add(ocispec.MediaTypeImageIndex, b)
	return im
}

// ociArchive writes the image as an OCI layout tar, as client.Import
// reads it, named name.
func (im *testImage) ociArchive(t testing.TB, name string) []byte {
	t.Helper()
	top := im.top
	top.Annotations = map[string]string{"io.containerd.image.name": name}
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{top}}
	idx.SchemaVersion = 2
	ib, _ := json.Marshal(idx)
	es := []entry{
		text(ocispec.ImageLayoutFile, `{"imageLayoutVersion":"1.0.0"}`),
		file(ocispec.ImageIndexFile, ib),
	}
	for d, b := range im.blobs {
		es = append(es, file("blobs/"+d.Algorithm().String()+"/"+d.Encoded(), b))
	}
	return tarLayer(t, es...)
}
