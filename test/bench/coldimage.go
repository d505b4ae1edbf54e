package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// vmImageLayout is the test bed registry's OCI layout of vmImage: its
// layers are the reference extraction's input.
const vmImageLayout = "/opt/crimux-testbed/images/crimux/vm-busybox"

// phaseColdImage (issue 18): CreateContainer of a VM whose image crimux
// has never unpacked. Each round stops crimux, empties its image cache,
// starts it again and times one VM pod's CreateContainer (the image is
// pulled already, as kubelet leaves it); the reference, alternating with
// it, extracts the same gzip layers on the same disk with tar -xzf, in
// order, and sync.
func (b *bench) phaseColdImage(ctx context.Context) error {
	layers, err := layerBlobs(vmImageLayout)
	if err != nil {
		return err
	}
	var crimux, tar stats.Samples
	for i := range b.opts.coldRounds {
		t, err := b.coldCreate(ctx, i)
		if err != nil {
			return fmt.Errorf("cold round %d: %w", i, err)
		}
		r, err := b.tarExtract(layers)
		if err != nil {
			return fmt.Errorf("tar round %d: %w", i, err)
		}
		crimux, tar = append(crimux, t), append(tar, r)
		b.logf("cold create %d: crimux %s, tar -xzf + sync %s", i, stats.Human(t), stats.Human(r))
	}
	b.samplesOf("ColdImage", tar, crimux)
	b.res.Set("vm_cold_create_ms", stats.Millis(crimux.Median()), crimux.Summary(0.5, 1), "")
	b.res.Set("vm_cold_create_tar_ms", stats.Millis(tar.Median()), tar.Summary(0.5, 1), "")
	b.res.Set("vm_cold_create_over_tar_ratio", float64(crimux.Median())/float64(tar.Median()), "", "")
	b.res.Note("vm_cold_create_ms", "%s (%d layers, %s), crimux's image cache emptied and crimux restarted before each", vmImage, len(layers), sizeOf(layers))
	return nil
}

// coldCreate restarts crimux with an empty image cache and times a VM
// pod's CreateContainer.
func (b *bench) coldCreate(ctx context.Context, round int) (time.Duration, error) {
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
	v, err := b.newVMPod(fmt.Sprintf("cold-%d", round))
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
	t0 := time.Now()
	ctr, err := b.cri.RT.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: v.pod, Config: b.vmContainerConfig(b.opts.vmMiB), SandboxConfig: cfg,
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
