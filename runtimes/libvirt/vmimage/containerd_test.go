package vmimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/crimux/crimux/internal/testbed"
)

// testbedSocket is the test bed's containerd (test/bed/up.sh).
const testbedSocket = "/run/crimux-testbed/containerd/containerd.sock"

// TestPrepareContainerd imports an image built here into the test bed's
// containerd (namespace k8s.io, as CRI pulls) and reads it back through
// the real content store.
func TestPrepareContainerd(t *testing.T) {
	testbed.Require(t)
	c, err := client.New(testbedSocket, client.WithTimeout(5*time.Second))
	testbed.Need(t, err, "containerd at %s (test/bed/up.sh starts it)", testbedSocket)
	t.Cleanup(func() { c.Close() }) // after the image's deletion below
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nsCtx := namespaces.WithNamespace(ctx, Namespace)

	// Unique content and name, so parallel runs never share a blob or a tag.
	name := fmt.Sprintf("crimux.test/vmimage-it:%d", time.Now().UnixNano())
	qcow := qcow2Image(nil)
	im := newTestImage(t, gzipped, map[string]string{KernelArgsLabel: "console=ttyS0"},
		layer(t, text("etc/image-name", name), file("boot/vmlinuz", []byte("bzImage "+name)), text("boot/initrd.img", "cpio")),
		layer(t, file("disk/root.qcow2", qcow)))
	if _, err := c.Import(nsCtx, bytes.NewReader(im.ociArchive(t, name))); err != nil {
		t.Fatalf("import: %v", err)
	}
	t.Cleanup(func() {
		if err := c.ImageService().Delete(namespaces.WithNamespace(context.Background(), Namespace), name, images.SynchronousDelete()); err != nil {
			t.Errorf("deleting %s: %v", name, err)
		}
	})

	r := NewReader(c.ImageService(), c.ContentStore(), t.TempDir())
	l, err := r.Prepare(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Digest != im.manifest.String() || l.Disk == nil || l.Disk.Format != FormatQcow2 || l.KernelArgs != "console=ttyS0" {
		t.Fatalf("layout = %+v", l)
	}
	for path, want := range map[string][]byte{l.Disk.Path: qcow, l.Kernel: []byte("bzImage " + name), l.Initrd: []byte("cpio")} {
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want the image's %d bytes", path, len(got), err, len(want))
		}
	}

	// Cached: same files, whether by name or by the image ID (config digest).
	before, _ := os.Stat(l.Disk.Path)
	for _, ref := range []string{name, im.config.String(), name + "@" + im.manifest.String()} {
		again, err := r.Prepare(ctx, ref)
		if err != nil {
			t.Fatalf("Prepare(%q): %v", ref, err)
		}
		if again.Digest != l.Digest || *again.Disk != *l.Disk || again.Kernel != l.Kernel {
			t.Fatalf("Prepare(%q) = %+v, want %+v", ref, again, l)
		}
	}
	if after, _ := os.Stat(l.Disk.Path); !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("a cached Prepare rewrote the disk")
	}

	if err := r.Remove(l.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Disk.Path); !os.IsNotExist(err) {
		t.Fatalf("disk still there after Remove: %v", err)
	}
}
