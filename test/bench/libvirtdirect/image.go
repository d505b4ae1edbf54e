package libvirtdirect

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"

	"github.com/crimux/crimux/runtimes/libvirt/vmimage"
)

// imageLayout is what a VM image holds for a VM (host paths), as crimux's
// VM runtime sees it.
type imageLayout struct {
	DiskPath, DiskFormat string
	Kernel, Initrd       string
	KernelArgs           string
}

// prepareImage reads the VM image ref's files out of the containerd at
// endpoint into cacheDir, as crimux's VM runtime does.
func prepareImage(ctx context.Context, endpoint, cacheDir, ref string) (imageLayout, error) {
	c, err := client.New(strings.TrimPrefix(endpoint, "unix://"))
	if err != nil {
		return imageLayout{}, fmt.Errorf("containerd client for VM images: %w", err)
	}
	defer c.Close()
	l, err := vmimage.NewReader(c.ImageService(), c.ContentStore(), cacheDir).Prepare(ctx, ref)
	if err != nil {
		return imageLayout{}, fmt.Errorf("VM image for the direct path: %w", err)
	}
	out := imageLayout{Kernel: l.Kernel, Initrd: l.Initrd, KernelArgs: l.KernelArgs}
	if l.Disk != nil {
		out.DiskPath, out.DiskFormat = l.Disk.Path, l.Disk.Format
	}
	return out, nil
}
