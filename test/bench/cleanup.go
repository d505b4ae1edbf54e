package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/daemon"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/machine"
	"github.com/crimux/crimux/test/bench/rawproxy"
	"github.com/crimux/crimux/test/bench/report"
)

// cleanup removes everything the run made; it logs what it cannot.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if b.crimux != nil && b.cri != nil {
		// The running guests paused first: they would load the cores the
		// removals need.
		b.cleanupWarn("pausing the guests", b.setGuestsPaused(ctx, true))
	}
	b.removePods(ctx)
	if b.direct != nil {
		b.cleanupWarn("direct VMs", b.direct.RemoveAll())
	}
	if b.crimux != nil {
		b.stopCrimux(ctx)
	}
	if b.own != nil {
		b.cleanupWarn("the run's containerd", b.killContainerd())
	}
	b.cleanupWarn("cgroups", cgroups.RemoveRun(b.runID))
	if out, err := exec.Command("ip", "link", "del", daemon.Bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find") {
		b.cleanupWarn("the VM pods' bridge", fmt.Errorf("%v: %s", err, out))
	}
	if b.direct != nil {
		b.direct.Close()
	}
	if b.dir != "" {
		b.cleanupWarn("state dir", os.RemoveAll(b.dir))
	}
	b.closeConnections()
	if b.socket != "" {
		_ = os.Remove(b.socket)
	}
	b.logf("cleanup took %s", time.Since(start).Round(100*time.Millisecond))
}

// cleanupWarn logs a step of the cleanup that failed (err not nil).
func (b *bench) cleanupWarn(what string, err error) {
	if err != nil {
		b.logf("cleanup: %s: %v", what, err)
	}
}

// removePods removes the VM pods (crimux, libvirtd) and the container pods
// (containerd) side by side: neither waits on the other's daemon.
func (b *bench) removePods(ctx context.Context) {
	var wg sync.WaitGroup
	if b.crimux != nil && b.cri != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.removeVMPods(ctx)
		}()
	}
	if b.ctd != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.removeContainerPods(ctx)
		}()
	}
	wg.Wait()
}

// removeVMPods removes the run's VM pods through crimux.
func (b *bench) removeVMPods(ctx context.Context) {
	t0 := time.Now()
	b.mu.Lock()
	vms := append([]*vmPod(nil), b.vms...)
	b.mu.Unlock()
	b.cleanupWarn("VM pods", criclient.Parallel(len(vms), b.opts.workers, func(i int) error { return b.removeVM(ctx, vms[i]) }))
	b.logf("cleanup: %d VM pods removed in %s", len(vms), time.Since(t0).Round(100*time.Millisecond))
}

// removeContainerPods removes the run's container pods from containerd
// (with the run's own containerd, the ones on the pod network), trying a
// second time when the first fails.
func (b *bench) removeContainerPods(ctx context.Context) {
	remove, what := b.removeLabelledPods, "container pods"
	if b.own != nil {
		remove, what = b.removeNetworkPods, "container pods on the pod network"
	}
	t0 := time.Now()
	n, err := remove(ctx)
	if err != nil {
		b.cleanupWarn(what+" (trying again)", err)
		_, err = remove(ctx)
		b.cleanupWarn(what, err)
	}
	b.logf("cleanup: %d %s removed in %s", n, what, time.Since(t0).Round(100*time.Millisecond))
}

// stopCrimux stops the run's crimux, removes the domains it left in
// libvirtd and keeps its log.
func (b *bench) stopCrimux(ctx context.Context) {
	b.crimux.Stop()
	_ = os.Remove(filepath.Dir(daemon.PlacementSocket)) // if no other run uses it
	if err := libvirtdirect.RemoveDomainsOf(daemon.InstanceOf(b.dir)); err != nil {
		// libvirtd away (restarted by a test?): give it a minute.
		b.cleanupWarn("leftover domains (waiting for libvirtd)", err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		b.cleanupWarn("leftover domains (the next run's sweep removes them)",
			waitUntil(wctx, time.Second, func() error { return libvirtdirect.RemoveDomainsOf(daemon.InstanceOf(b.dir)) }))
		cancel()
	}
	b.keepLog()
}

// closeConnections closes the run's CRI connections and stops the raw
// forwarder.
func (b *bench) closeConnections() {
	for _, e := range []*criclient.Endpoint{b.cri, b.ctd, b.raw} {
		if e != nil {
			e.Close()
		}
	}
	switch p := b.rawFwd.(type) {
	case *rawproxy.Process:
		p.Stop()
	case *rawproxy.Proxy:
		p.Close()
	}
}

// removeLabelledPods removes every pod of this run containerd still has
// (the container pods; crimux's IDs for them are containerd's).
func (b *bench) removeLabelledPods(ctx context.Context) (int, error) {
	resp, err := b.ctd.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: b.labels()},
	})
	if err != nil {
		return 0, err
	}
	items := resp.GetItems()
	return len(items), criclient.Parallel(len(items), b.opts.workers, func(i int) error { return criclient.RemovePod(ctx, b.ctd, items[i].GetId()) })
}

// keepLog copies crimux's log of the run out of the state dir.
func (b *bench) keepLog() {
	if b.opts.logDir == "" {
		return
	}
	data, err := os.ReadFile(b.crimux.LogPath)
	if err != nil {
		return
	}
	if os.MkdirAll(b.opts.logDir, 0o755) == nil {
		_ = os.WriteFile(filepath.Join(b.opts.logDir, "crimux.log"), data, 0o644)
	}
}

// finish writes the samples and the Markdown table.
func (b *bench) finish() {
	b.host.LoadEnd = machine.ReadLoad()
	b.host.Took = time.Since(b.started)
	if b.opts.samples != "" {
		if err := os.MkdirAll(filepath.Dir(b.opts.samples), 0o755); err == nil {
			if err := os.WriteFile(b.opts.samples, []byte(b.samples.String()), 0o644); err != nil {
				b.logf("samples: %v", err)
			}
		}
	}
	if b.opts.out != "" {
		if err := report.WriteDoc(b.opts.out, b.res, b.host, b.opts.counts()); err != nil {
			b.logf("%s: %v", b.opts.out, err)
		} else {
			b.logf("wrote %s", b.opts.out)
		}
	}
	b.logf("done in %s", b.host.Took.Round(time.Second))
}
