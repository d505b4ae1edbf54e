package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

// vmLayerFormat versions the cached layers: bump it when a layer's recipe
// changes in a way its cache key does not see.
const vmLayerFormat = "crimux-vm-layer-v1"

// layerCache keeps built layers by a hash of their inputs and forgets the
// ones a build did not use.
type layerCache struct {
	dir  string
	used map[string]bool
}

// cachedLayerFunc builds a layer through the cache: key names its inputs
// (with createdBy), fill writes its files when the cache has no such layer.
type cachedLayerFunc func(createdBy, key string, fill func(l *oci.LayerBuilder) error) (oci.SpecLayer, error)

// specLayer is a cachedLayerFunc of this cache.
func (c *layerCache) specLayer(createdBy, key string, fill func(l *oci.LayerBuilder) error) (oci.SpecLayer, error) {
	l, err := c.get(createdBy+"\n"+key, func() (oci.Layer, error) {
		lb := oci.NewLayer()
		if err := fill(lb); err != nil {
			return oci.Layer{}, err
		}
		return lb.Build()
	})
	return oci.SpecLayer{Layer: l, CreatedBy: createdBy}, err
}

func (c *layerCache) get(key string, build func() (oci.Layer, error)) (oci.Layer, error) {
	if c.dir == "" {
		return build()
	}
	sum := sha256.Sum256([]byte(vmLayerFormat + "\n" + runtime.Version() + "\n" + key))
	name := hex.EncodeToString(sum[:])
	c.used[name] = true
	blobPath := filepath.Join(c.dir, name+".tar.gz")
	diffPath := filepath.Join(c.dir, name+".diffid")
	if data, err := os.ReadFile(blobPath); err == nil {
		if diff, err := os.ReadFile(diffPath); err == nil && strings.HasPrefix(string(diff), "sha256:") {
			return oci.Layer{Blob: oci.NewBlob(oci.MediaTypeLayerGzip, data), DiffID: strings.TrimSpace(string(diff))}, nil
		}
	}
	l, err := build()
	if err != nil {
		return oci.Layer{}, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return oci.Layer{}, err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{diffPath, []byte(l.DiffID + "\n")}, {blobPath, l.Data}} {
		if err := writeFileAtomic(f.path, f.data); err != nil {
			return oci.Layer{}, err
		}
	}
	return l, nil
}

// prune removes the cached layers this build did not use.
func (c *layerCache) prune() error {
	if c.dir == "" {
		return nil
	}
	entries, err := os.ReadDir(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".tar.gz"), ".diffid")
		if !c.used[name] {
			if err := os.RemoveAll(filepath.Join(c.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeFileAtomic(p string, data []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func hashOf(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileSHA(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
