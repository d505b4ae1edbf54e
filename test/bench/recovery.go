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

// phaseRecovery measures crimux's memory and its restart after SIGKILL
// twice: with the container pods and the burst VMs (about 100 pods), then
// with pods added up to -scale-pods records (scale.go), where it also
// compares ListContainers with containerd's.
func (b *bench) phaseRecovery(ctx context.Context) error {
	b.dropDeadPods(ctx)
	if err := b.startContainerPods(ctx, b.opts.recoveryContainers); err != nil {
		b.logf("recovery: %v", err)
	}
	want := b.recoveryWant()
	if err := b.measureRecovery(ctx, want, "Recovery", "rss_100pods_mib", "recovery_100_ms"); err != nil {
		return err
	}
	if b.opts.scalePods <= len(want.pods) {
		return nil
	}
	t0 := time.Now()
	if err := b.setGuestsPaused(ctx, true); err != nil {
		b.logf("scale: the guests not paused (the pods are made beside them): %v", err)
	}
	err := b.scaleUp(ctx)
	if err := b.setGuestsPaused(ctx, false); err != nil {
		return fmt.Errorf("resuming the guests: %w", err)
	}
	if err != nil {
		return fmt.Errorf("adding pods up to %d: %w", b.opts.scalePods, err)
	}
	b.logf("scale: %d pods made in %s (the burst's guests paused meanwhile)", b.opts.scalePods-len(want.pods), time.Since(t0).Round(100*time.Millisecond))
	want = b.recoveryWant()
	if err := b.measureRecovery(ctx, want, "RecoveryScale", "rss_1000pods_mib", "recovery_1000_ms"); err != nil {
		return err
	}
	// Last: it leaves containerd the containers it adds (scale_list.go).
	return b.listContainersRatio(ctx, "list_containers_1000_ratio")
}

// recoveryList is what a complete list after a restart holds: these
// containers and pods (the bench's; other users' are not waited for).
type recoveryList struct {
	containers, pods map[string]bool
	vms              int // of the pods
}

// recoveryWant is every container and pod the bench keeps: the container
// pods, the burst VMs, and the scale pods (scale.go).
func (b *bench) recoveryWant() recoveryList {
	w := recoveryList{containers: map[string]bool{}, pods: map[string]bool{}}
	for _, p := range b.pods {
		w.containers[p.container], w.pods[p.pod] = true, true
	}
	for _, v := range append(append([]*vmPod(nil), b.burstVMs...), b.stoppedVMs...) {
		w.containers[v.container], w.pods[v.pod] = true, true
		w.vms++
	}
	for _, id := range b.pausePods {
		w.pods[id] = true
	}
	return w
}

// measureRecovery records crimux's RSS with want's pods, then SIGKILLs and
// restarts it recoveryRounds times, timing each until both lists are
// complete.
func (b *bench) measureRecovery(ctx context.Context, want recoveryList, samples, rssName, recoveryName string) error {
	if err := b.listsAll(ctx, b.cri.RT, want); err != nil {
		return fmt.Errorf("before the first kill: %w", err)
	}
	time.Sleep(time.Second) // let the list's garbage settle, as an idle kubelet poll would
	what := fmt.Sprintf("%d pods: %d VM pods (%d running), %d container pods (%d with a container)",
		len(want.pods), want.vms, len(b.burstVMs), len(want.pods)-want.vms, len(b.pods))
	if rss, err := b.crimux.RSSMiB(); err == nil {
		b.res.Set(rssName, rss, "", "")
		b.res.Note(rssName, "%s", what)
		b.logf("crimux RSS with %s: %.1f MiB", what, rss)
	}
	var took stats.Samples
	for i := range b.opts.recoveryRounds {
		t, err := b.killAndRecover(ctx, want)
		if err != nil {
			return fmt.Errorf("recovery round %d: %w", i, err)
		}
		took = append(took, t)
		b.logf("recovery %d with %d pods: %s", i, len(want.pods), stats.Human(t))
	}
	if err := b.redial(); err != nil {
		return err
	}
	b.samplesOf(samples, nil, took)
	b.res.Set(recoveryName, stats.Millis(took.Median()), took.Summary(0.5, 1), "")
	b.res.Note(recoveryName, "%s; from SIGKILL to the first complete ListContainers and ListPodSandbox, a new connection per attempt", what)
	return nil
}

// killAndRecover SIGKILLs crimux, starts it again and polls the lists on
// fresh connections (no reconnect backoff) until every wanted ID is
// listed.
func (b *bench) killAndRecover(ctx context.Context, want recoveryList) (time.Duration, error) {
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

// listsAll lists containers and pods and checks that every wanted ID is
// there.
func (b *bench) listsAll(ctx context.Context, rt runtimeapi.RuntimeServiceClient, want recoveryList) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	seen := 0
	for _, c := range resp.GetContainers() {
		if want.containers[c.GetId()] {
			seen++
		}
	}
	if seen != len(want.containers) {
		return fmt.Errorf("ListContainers lists %d of the %d containers", seen, len(want.containers))
	}
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	seen = 0
	for _, p := range pods.GetItems() {
		if want.pods[p.GetId()] {
			seen++
		}
	}
	if seen != len(want.pods) {
		return fmt.Errorf("ListPodSandbox lists %d of the %d pods", seen, len(want.pods))
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
