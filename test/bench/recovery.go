package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// phaseRecovery measures crimux's memory with the container pods and
// burst VMs running, then SIGKILLs and restarts it, timing each restart
// until ListContainers lists every one of them.
func (b *bench) phaseRecovery(ctx context.Context) error {
	b.dropDeadPods(ctx)
	if err := b.startContainerPods(ctx, b.opts.recoveryContainers); err != nil {
		b.logf("recovery: %v", err)
	}
	want := map[string]bool{}
	for _, p := range b.pods {
		want[p.container] = true
	}
	for _, v := range b.burstVMs {
		want[v.container] = true
	}
	if err := b.listsAll(ctx, b.cri.RT, want); err != nil {
		return fmt.Errorf("before the first kill: %w", err)
	}
	time.Sleep(time.Second) // let the list's garbage settle, as an idle kubelet poll would
	if rss, err := b.crimux.RSSMiB(); err == nil {
		b.res.Set("rss_100pods_mib", rss, "", "")
		b.res.Note("rss_100pods_mib", "%d VM pods and %d container pods", len(b.burstVMs), len(b.pods))
		b.logf("crimux RSS with %d VMs and %d containers: %.1f MiB", len(b.burstVMs), len(b.pods), rss)
	}
	var took stats.Samples
	for i := range b.opts.recoveryRounds {
		t, err := b.killAndRecover(ctx, want)
		if err != nil {
			return fmt.Errorf("recovery round %d: %w", i, err)
		}
		took = append(took, t)
		b.logf("recovery %d: %s", i, stats.Human(t))
	}
	if err := b.redial(); err != nil {
		return err
	}
	b.samplesOf("Recovery", nil, took)
	b.res.Set("recovery_100_ms", stats.Millis(took.Median()), took.Summary(0.5, 1), "")
	b.res.Note("recovery_100_ms", "%d VMs and %d containers listed; from SIGKILL to the first complete ListContainers, a new connection per attempt", len(b.burstVMs), len(b.pods))
	return nil
}

// killAndRecover SIGKILLs crimux, starts it again and polls ListContainers
// on fresh connections (no reconnect backoff) until every wanted ID is
// listed.
func (b *bench) killAndRecover(ctx context.Context, want map[string]bool) (time.Duration, error) {
	t0 := time.Now()
	b.crimux.Kill()
	if err := b.crimux.Start(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := waitUntil(ctx, 2*time.Millisecond, func() error {
		conn, err := grpc.NewClient("unix://"+b.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
		if err != nil {
			return err
		}
		defer conn.Close()
		return b.listsAll(ctx, runtimeapi.NewRuntimeServiceClient(conn), want)
	})
	return time.Since(t0), err
}

// listsAll lists containers and checks that every wanted ID is there.
func (b *bench) listsAll(ctx context.Context, rt runtimeapi.RuntimeServiceClient, want map[string]bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	seen := 0
	for _, c := range resp.GetContainers() {
		if want[c.GetId()] {
			seen++
		}
	}
	if seen != len(want) {
		return fmt.Errorf("ListContainers lists %d of the %d containers", seen, len(want))
	}
	return nil
}

// redial replaces the crimux connection after restarts (a connection in
// reconnect backoff would fail calls fast).
func (b *bench) redial() error {
	b.cri.Close()
	e, err := criclient.Dial("crimux", "unix://"+b.socket)
	if err != nil {
		return err
	}
	b.cri = e
	return nil
}
