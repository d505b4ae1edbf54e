package main

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaseName is the Lease the replicas elect their leader with.
const leaseName = "crimux-controller"

// errLostLease ends a leader that lost its Lease: its process exits (the
// Deployment starts it again, to wait its turn), so that no two replicas
// ever act at once; the new leader resumes what this one left.
var errLostLease = errors.New("lost the leader election's Lease")

// lead runs act while this replica holds the Lease.
func lead(ctx context.Context, kube kubernetes.Interface, f flags, log *slog.Logger, act func(context.Context)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: leaseName, Namespace: f.leaseNamespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: f.id},
	}
	lost := make(chan struct{})
	acted := make(chan struct{})
	var led atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   f.leaseDuration,
		RenewDeadline:   f.leaseDuration * 2 / 3,
		RetryPeriod:     f.leaseDuration / 7,
		ReleaseOnCancel: true,
		Name:            leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led.Store(true)
				defer close(acted)
				act(ctx)
			},
			OnStoppedLeading: func() { close(lost) },
			OnNewLeader: func(id string) {
				if id != f.id {
					log.Info("another replica leads; waiting", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	if led.Load() {
		<-acted // its workers stopped, each migration as its status says
	}
	if ctx.Err() != nil {
		return nil // stopped (SIGTERM): the Lease was released
	}
	select {
	case <-lost:
		return errLostLease
	default:
		return nil
	}
}
