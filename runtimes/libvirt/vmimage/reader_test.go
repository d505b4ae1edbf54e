package vmimage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// vmImage is a disk image whose amd64 manifest holds disk and an arm64
// one a different disk; the index is the image's target.
func vmImage(t *testing.T, disk []byte) *testImage {
	return newIndexImage(t, func(im *testImage) []ocispec.Descriptor {
		return []ocispec.Descriptor{
			im.addManifest(t, "arm64", gzipped, nil, layer(t, text("disk/arm.raw", "arm"))),
			im.addManifest(t, "amd64", gzipped, nil,
				layer(t, text("etc/os-release", "x"), text("disk/old.raw", "old")),
				layer(t, whiteout("disk", "old.raw"), file("disk/vm.qcow2", disk))),
		}
	})
}

func TestPrepareResolvesAndCaches(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	qcow := qcow2Image(nil)
	im := vmImage(t, qcow)
	store.put("docker.io/library/vm:latest", im)
	dir := t.TempDir()
	r := NewReader(store, store, dir)

	l, err := r.Prepare(ctx, "vm")
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{Digest: im.manifest.String(), Disk: &Disk{Path: filepath.Join(dir, cacheKey(im.manifest), "disk.qcow2"), Format: FormatQcow2, VirtualSize: 1 << 20}}
	if l.Digest != want.Digest || l.Disk == nil || *l.Disk != *want.Disk || l.Kernel != "" || l.Initrd != "" {
		t.Fatalf("layout = %+v, want %+v", l, want)
	}
	if got, _ := os.ReadFile(l.Disk.Path); !bytes.Equal(got, qcow) {
		t.Fatal("disk content differs from the amd64 image's")
	}
	layers := im.layerBlobs()
	opens := func() (n int) {
		for _, d := range layers {
			n += store.openCount(d)
		}
		return n
	}
	first := opens()
	if first != 2 { // both amd64 layers indexed, the disk copied from the top one as it is
		t.Fatalf("layer blobs opened %d times, want 2", first)
	}

	for _, ref := range []string{
		"vm:latest",
		"docker.io/library/vm",
		"docker.io/library/vm@" + im.top.Digest.String(), // no record by that name: scanned
		im.config.String(), // the image ID CRI hands back
	} {
		got, err := r.Prepare(ctx, ref)
		if err != nil {
			t.Fatalf("Prepare(%q): %v", ref, err)
		}
		if got.Digest != l.Digest || *got.Disk != *l.Disk {
			t.Fatalf("Prepare(%q) = %+v, want %+v", ref, got, l)
		}
	}
	if opens() != first {
		t.Fatalf("cached Prepare read layers again: %d opens, want %d", opens(), first)
	}
	if cached, err := r.Cached(); err != nil || len(cached) != 1 || cached[0] != im.manifest.String() {
		t.Fatalf("Cached() = %v, %v", cached, err)
	}
	if err := r.Remove(l.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(l.Disk.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("entry still there after Remove: %v", err)
	}
	if err := r.Remove(l.Digest); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := r.Prepare(ctx, "vm"); err != nil || opens() != 2*first {
		t.Fatalf("Prepare after Remove: %v, %d opens", err, opens())
	}
}

func TestPrepareKernel(t *testing.T) {
	store := newFakeStore()
	for _, c := range []compression{gzipped, zstded, plain} {
		im := newTestImage(t, c, map[string]string{KernelArgsLabel: "console=ttyS0 root=/dev/vda"},
			layer(t, text("boot/vmlinuz-6.1", "bzImage"), symlink("boot/vmlinuz", "vmlinuz-6.1"), text("boot/initrd.img", "cpio")))
		store.put("kernel", im)
		r := NewReader(store, store, t.TempDir())
		l, err := r.Prepare(context.Background(), "kernel")
		if err != nil {
			t.Fatal(err)
		}
		if l.Disk != nil || l.KernelArgs != "console=ttyS0 root=/dev/vda" || filepath.Base(l.Kernel) != "vmlinuz" || filepath.Base(l.Initrd) != "initrd.img" {
			t.Fatalf("layout = %+v", l)
		}
		if b, _ := os.ReadFile(l.Kernel); string(b) != "bzImage" {
			t.Fatalf("kernel = %q", b)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	backed := qcow2Image(func(b []byte) {
		be64(b, 8, 0x1000)
		be32(b, 16, 8)
		copy(b[0x1000:], "/dev/sda")
	})
	tests := []struct {
		name    string
		image   func(t *testing.T) *testImage
		ref     string
		class   error
		wantErr string
	}{{
		name:    "not in the store",
		ref:     "nothere:1",
		class:   errdefs.ErrNotFound,
		wantErr: `image "nothere:1": not found`,
	}, {
		name:    "image ID not in the store",
		ref:     digest.FromString("x").String(),
		class:   errdefs.ErrNotFound,
		wantErr: "not found",
	}, {
		name:    "backing file",
		image:   func(t *testing.T) *testImage { return vmImage(t, backed) },
		class:   errdefs.ErrInvalidArgument,
		wantErr: `image "bad": /disk/vm.qcow2: qcow2 names a backing file "/dev/sda"`,
	}, {
		name: "neither disk nor kernel",
		image: func(t *testing.T) *testImage {
			return newTestImage(t, gzipped, nil, layer(t, text("etc/motd", "hi")))
		},
		class:   errdefs.ErrInvalidArgument,
		wantErr: `image "bad" has neither a disk under /disk/ nor a kernel at /boot/vmlinuz`,
	}, {
		name: "kernel arguments without a kernel",
		image: func(t *testing.T) *testImage {
			return newTestImage(t, gzipped, map[string]string{KernelArgsLabel: "quiet"}, layer(t, text("disk/a.raw", "raw")))
		},
		class:   errdefs.ErrInvalidArgument,
		wantErr: `image "bad": label crimux.io/kernel-args: kernel arguments without a kernel at /boot/vmlinuz`,
	}, {
		name: "kernel arguments with a newline",
		image: func(t *testing.T) *testImage {
			return newTestImage(t, gzipped, map[string]string{KernelArgsLabel: "quiet\ninit=/x"}, layer(t, text("boot/vmlinuz", "k")))
		},
		class:   errdefs.ErrInvalidArgument,
		wantErr: "contains control character 0xa",
	}, {
		name: "no linux/amd64 manifest",
		image: func(t *testing.T) *testImage {
			return newIndexImage(t, func(im *testImage) []ocispec.Descriptor {
				return []ocispec.Descriptor{
					im.addManifest(t, "arm64", gzipped, nil, layer(t, text("disk/a.raw", "raw"))),
					im.addManifest(t, "386", gzipped, nil, layer(t, text("disk/a.raw", "raw"))),
				}
			})
		},
		class:   errdefs.ErrInvalidArgument,
		wantErr: "has no linux/amd64 manifest",
	}, {
		name: "layer blob missing",
		image: func(t *testing.T) *testImage {
			im := newTestImage(t, gzipped, nil, layer(t, text("disk/a.raw", "raw")))
			for d, b := range im.blobs {
				if b[0] == 0x1f {
					delete(im.blobs, d)
				}
			}
			return im
		},
		class:   errdefs.ErrFailedPrecondition,
		wantErr: "discard_unpacked_layers",
	}, {
		name: "corrupt gzip layer",
		image: func(t *testing.T) *testImage {
			im := newTestImage(t, gzipped, nil, layer(t, text("disk/a.raw", "raw")))
			for d, b := range im.blobs {
				if b[0] == 0x1f {
					im.blobs[d] = append([]byte{0x1f, 0x8b, 0, 0}, b[4:]...)
				}
			}
			return im
		},
		class:   errdefs.ErrInvalidArgument,
		wantErr: `image "bad": layer 0`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			ref := tt.ref
			if tt.image != nil {
				store.put("docker.io/library/bad:latest", tt.image(t))
				ref = "bad"
			}
			dir := t.TempDir()
			_, err := NewReader(store, store, dir).Prepare(context.Background(), ref)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, tt.class) {
				t.Fatalf("err = %v, want class %v", err, tt.class)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("cache holds %v after a failure", entries)
			}
		})
	}
}

func TestPrepareConcurrent(t *testing.T) {
	store := newFakeStore()
	im := newTestImage(t, gzipped, nil, layer(t, file("disk/vm.qcow2", qcow2Image(nil))))
	store.put("docker.io/library/vm:latest", im)
	r := NewReader(store, store, t.TempDir())
	var wg sync.WaitGroup
	var failures atomic.Int32
	results := make([]Layout, 8)
	for i := range results {
		wg.Go(func() {
			l, err := r.Prepare(context.Background(), "vm")
			if err != nil {
				t.Error(err)
				failures.Add(1)
			}
			results[i] = l
		})
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	for _, l := range results[1:] {
		if l.Digest != results[0].Digest || *l.Disk != *results[0].Disk {
			t.Fatalf("layouts differ: %+v, %+v", l, results[0])
		}
	}
	if n := store.openCount(im.layerBlobs()[0]); n != 1 {
		t.Fatalf("layer opened %d times, want 1 (one extraction, one pass)", n)
	}
}

// layerBlobs are the image's compressed layers (gzip or zstd magic).
func (im *testImage) layerBlobs() []digest.Digest {
	var out []digest.Digest
	for d, b := range im.blobs {
		if len(b) > 1 && (b[0] == 0x1f || b[0] == 0x28) {
			out = append(out, d)
		}
	}
	return out
}

func TestPrepareReplacesLeftovers(t *testing.T) {
	store := newFakeStore()
	im := newTestImage(t, gzipped, nil, layer(t, text("disk/vm.raw", "raw")))
	store.put("docker.io/library/vm:latest", im)
	dir := t.TempDir()
	stale := filepath.Join(dir, ".tmp-"+cacheKey(im.manifest)+"-123")
	broken := filepath.Join(dir, cacheKey(im.manifest))
	for _, d := range []string{stale, broken} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(broken, "disk.raw"), []byte("half"), 0o644)
	l, err := NewReader(store, store, dir).Prepare(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(l.Disk.Path); string(b) != "raw" {
		t.Fatalf("disk = %q, want the image's", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != cacheKey(im.manifest) {
		t.Fatalf("cache dir holds %v", entries)
	}
}

func TestPrepareCanceled(t *testing.T) {
	store := newFakeStore()
	store.put("docker.io/library/vm:latest", newTestImage(t, gzipped, nil, layer(t, text("disk/vm.raw", "raw"))))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewReader(store, store, t.TempDir()).Prepare(ctx, "vm")
	if !errors.Is(err, context.Canceled) || errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err = %v, want context.Canceled only", err)
	}
}

func TestPrepareOtherNamespace(t *testing.T) {
	store := newFakeStore()
	store.namespace = "default"
	store.put("docker.io/library/vm:latest", newTestImage(t, gzipped, nil, layer(t, text("disk/vm.raw", "raw"))))
	if _, err := NewReader(store, store, t.TempDir()).Prepare(context.Background(), "vm"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("k8s.io reader found a default-namespace image: %v", err)
	}
	if _, err := NewReader(store, store, t.TempDir(), WithNamespace("default")).Prepare(context.Background(), "vm"); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveRejectsBadDigests(t *testing.T) {
	r := NewReader(newFakeStore(), newFakeStore(), t.TempDir())
	for _, d := range []string{"../../etc", "sha256:../x", "sha256-abc", ""} {
		if err := r.Remove(d); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Remove(%q) = %v, want invalid argument", d, err)
		}
	}
	if err := r.Remove(digest.FromString("absent").String()); err != nil {
		t.Errorf("Remove of an absent entry: %v", err)
	}
}

func TestMaxDiskSize(t *testing.T) {
	store := newFakeStore()
	store.put("docker.io/library/vm:latest", newTestImage(t, gzipped, nil, layer(t, text("disk/vm.raw", "0123456789"))))
	_, err := NewReader(store, store, t.TempDir(), WithMaxDiskSize(5)).Prepare(context.Background(), "vm")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `image "vm": /disk/vm.raw: is 10 bytes, more than the limit of 5`) {
		t.Fatalf("err = %v", err)
	}
}
