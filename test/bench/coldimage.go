package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/bigimage"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// vmImageLayout is the test bed registry's OCI layout of vmImage: its
// layers are the reference extraction's input.
const vmImageLayout = "/opt/crimux-testbed/images/crimux/vm-busybox"

// phaseColdImage: CreateContainer of a VM whose image crimux has never
// unpacked, for the busybox test image (53 MiB of files) and for a 1 GiB
// raw disk of real data (bigimage). Each round stops crimux, empties its
// image cache, starts it again and times one VM pod's CreateContainer (the
// image is pulled already, as kubelet leaves it); the reference,
// alternating with it, extracts the same gzip layers on the same disk with
// tar -xzf, in order, and sync.
func (b *bench) phaseColdImage(ctx context.Context) error {
	if err := b.coldImage(ctx, vmImage, vmImageLayout, b.opts.coldRounds, "vm_cold_create"); err != nil {
		return err
	}
	if b.opts.coldBigRounds == 0 {
		return nil
	}
	t0 := time.Now()
	layout, err := bigimage.Ensure(filepath.Dir(filepath.Dir(vmImageLayout)))
	if err != nil {
		return fmt.Errorf("the 1 GiB image: %w", err)
	}
	b.logf("the 1 GiB image: %s (%s)", layout, stats.Human(time.Since(t0)))
	if err := criclient.Pull(ctx, b.cri, bigimage.Ref); err != nil {
		return err
	}
	defer b.removeImage(context.WithoutCancel(ctx), bigimage.Ref)
	return b.coldImage(ctx, bigimage.Ref, layout, b.opts.coldBigRounds, "vm_cold_create_1g")
}

// coldImage times rounds cold CreateContainers of image against tar -xzf
// of its layers (layout) and records the figures prefix_ms, prefix_tar_ms
// and prefix_over_tar_ratio.
func (b *bench) coldImage(ctx context.Context, image, layout string, rounds int, prefix string) error {
	layers, err := layerBlobs(layout)
	if err != nil {
		return err
	}
	var crimux, tar stats.Samples
	for i := range rounds {
		t, err := b.coldCreate(ctx, fmt.Sprintf("%s-%d", prefix, i), image)
		if err != nil {
			return fmt.Errorf("%s round %d: %w", prefix, i, err)
		}
		r, err := b.tarExtract(layers)
		if err != nil {
			return fmt.Errorf("tar round %d: %w", i, err)
		}
		crimux, tar = append(crimux, t), append(tar, r)
		b.logf("%s %d: crimux %s, tar -xzf + sync %s", prefix, i, stats.Human(t), stats.Human(r))
	}
	b.samplesOf(benchName(prefix), tar, crimux)
	b.res.Set(prefix+"_ms", stats.Millis(crimux.Median()), crimux.Summary(0.5, 1), "")
	b.res.Set(prefix+"_tar_ms", stats.Millis(tar.Median()), tar.Summary(0.5, 1), "")
	b.res.Set(prefix+"_over_tar_ratio", float64(crimux.Median())/float64(tar.Median()), "", "")
	b.res.Note(prefix+"_ms", "%s (%d layers, %s), crimux's image cache emptied and crimux restarted before each", image, len(layers), sizeOf(layers))
	return nil
}

// benchName is a figure prefix as a Go benchmark name: vm_cold_create_1g
// is ColdImage1g (vm_cold_create stays ColdImage, as before).
func benchName(prefix string) string {
	suffix, _ := strings.CutPrefix(prefix, "vm_cold_create")
	return "ColdImage" + strings.TrimPrefix(suffix, "_")
}

// coldCreate restarts crimux with an empty image cache and times a VM
// pod's CreateContainer.
func (b *bench) coldCreate(ctx context.Context, name, image string) (time.Duration, error) {
	b.crimux.Stop()
	if err := os.RemoveAll(filepath.Join(b.dir, "state", "images")); err != nil {
		return 0, err
	}
	if err := b.crimux.Start(); err != nil {
		return 0, err
	}
	if err := b.redial(); err != nil {
		return 0, err
	}
	if err := b.waitVMRuntime(ctx); err != nil {
		return 0, err
	}
	v, err := b.newVMPod(name)
	if err != nil {
		return 0, err
	}
	defer func() { _ = b.removeVM(context.WithoutCancel(ctx), v) }()
	cctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	cfg := b.vmPodConfig(v)
	pod, err := b.cri.RT.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
	if err != nil {
		return 0, err
	}
	v.pod = pod.PodSandboxId
	b.trackVM(v)
	ccfg := b.vmContainerConfig(b.opts.vmMiB)
	ccfg.Image = &runtimeapi.ImageSpec{Image: image}
	t0 := time.Now()
	ctr, err := b.cri.RT.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: v.pod, Config: ccfg, SandboxConfig: cfg,
	})
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	v.container = ctr.ContainerId
	return took, nil
}

// tarExtract times tar -xzf of the layers, in order, into a fresh
// directory of the run's (the disk crimux's cache is on), then sync.
func (b *bench) tarExtract(layers []string) (time.Duration, error) {
	dir, err := os.MkdirTemp(b.dir, "tar-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	for _, layer := range layers {
		if out, err := exec.Command("tar", "-xzf", layer, "-C", dir).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("tar -xzf %s: %v: %s", layer, err, out)
		}
	}
	if err := exec.Command("sync").Run(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// layerBlobs follows an OCI layout's index (and a nested index, to its
// first manifest) to the manifest's layer blobs, base first.
func layerBlobs(layout string) ([]string, error) {
	blob := func(digest string) string {
		return filepath.Join(layout, "blobs", "sha256", digest[len("sha256:"):])
	}
	var doc struct {
		Manifests []struct{ MediaType, Digest string } `json:"manifests"`
		Layers    []struct{ Digest string }            `json:"layers"`
	}
	path := filepath.Join(layout, "index.json")
	for range 3 {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		doc.Manifests, doc.Layers = nil, nil
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch {
		case len(doc.Layers) > 0:
			var out []string
			for _, l := range doc.Layers {
				out = append(out, blob(l.Digest))
			}
			return out, nil
		case len(doc.Manifests) > 0:
			path = blob(doc.Manifests[0].Digest)
		default:
			return nil, fmt.Errorf("%s: neither manifests nor layers", path)
		}
	}
	return nil, fmt.Errorf("%s: no manifest within 3 levels", layout)
}

// sizeOf is the layers' total size, for the figure's note.
func sizeOf(paths []string) string {
	var n int64
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "?"
		}
		n += fi.Size()
	}
	return fmt.Sprintf("%.1f MiB gzip", float64(n)/(1<<20))
}

// removeImage removes image from containerd (through crimux), logging a
// failure: the run leaves no image of its own behind.
func (b *bench) removeImage(ctx context.Context, image string) {
	cctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	if _, err := b.cri.Img.RemoveImage(cctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		b.logf("remove image %s: %v", image, err)
	}
}
