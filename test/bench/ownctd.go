package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/ctd"
	"github.com/crimux/crimux/test/bench/runs"
)

// The run's own containerd (-own-containerd, test/bench/ctd): both paths
// use it, and the run's end kills it with the pods left in it.

// startContainerd starts the run's containerd from the bed's binary and
// config and points the run at it (opts.containerd).
func (b *bench) startContainerd(ctx context.Context) error {
	c, err := ctd.Start(b.opts.containerdBin, b.opts.containerdConfig, filepath.Join(b.dir, "containerd"), b.runID)
	if c != nil {
		b.own = c
	}
	if err != nil {
		return err
	}
	err = c.Wait(ctx, 30*time.Second, func(ctx context.Context) error {
		e, err := criclient.Dial("containerd", c.Endpoint())
		if err != nil {
			return err
		}
		defer e.Close()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = e.RT.Version(cctx, &runtimeapi.VersionRequest{})
		return err
	})
	if err != nil {
		return err
	}
	b.opts.containerd = c.Endpoint()
	b.logf("containerd of the run's own: %s (root %s)", c.Endpoint(), c.Root)
	return nil
}

// sweep removes what dead runs left, in the bed's containerd too (runs
// before the bench had its own made their pods there).
func (b *bench) sweep(ctx context.Context) error {
	bed, err := criclient.Dial("containerd", b.opts.containerd)
	if err != nil {
		return err
	}
	defer bed.Close()
	return runs.Sweep(ctx, bed, b.logf)
}

// removeNetworkPods removes, through CRI, the run's pods that are on the
// pod network (their CNI addresses are the bed's IPAM's): the kill of
// the run's containerd takes the others.
func (b *bench) removeNetworkPods(ctx context.Context) (int, error) {
	resp, err := b.ctd.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: b.labels()},
	})
	if err != nil {
		return 0, err
	}
	items := resp.GetItems()
	var n atomic.Int32
	err = criclient.Parallel(len(items), b.opts.workers, func(i int) error {
		cctx, cancel := criclient.CallCtx(ctx)
		st, err := b.ctd.RT.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: items[i].GetId()})
		cancel()
		if err != nil {
			return fmt.Errorf("pod %s: %w", items[i].GetId(), err)
		}
		if st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
			return nil
		}
		n.Add(1)
		return criclient.RemovePod(ctx, b.ctd, items[i].GetId())
	})
	return int(n.Load()), err
}

// killContainerd kills the run's containerd, its shims and the container
// pods' processes, and removes its dirs.
func (b *bench) killContainerd() error {
	t0 := time.Now()
	err := b.own.Kill(b.opts.logDir)
	_ = os.Remove(ctd.StateBase) // if no other run uses it
	b.logf("cleanup: the run's containerd killed with its pods in %s", time.Since(t0).Round(100*time.Millisecond))
	return err
}
