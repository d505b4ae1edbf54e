package gc

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// finishSandboxes converges VM pods the store says are on their way out
// or were never finished: Removing ones (a removal whose network teardown
// failed), Creating ones abandoned by a crash or a failed RunPodSandbox,
// and stopped ones whose CNI DEL failed. Each gets CNI DEL until it
// succeeds; then the record goes (or, for a stopped pod, is marked down).
func (r *Collector) finishSandboxes(ctx context.Context, rep *GCReport, afterStart bool) {
	recs, err := r.Store.Sandboxes()
	if err != nil {
		return
	}
	for _, sb := range recs {
		if sandboxTeardown(sb, afterStart) == teardownNone {
			continue
		}
		done, err := r.finishSandbox(ctx, sb.ID, afterStart)
		if err != nil {
			rep.Pending++
			r.Log.Warn("VM pod teardown still failing", "sandbox", sb.ID, "err", err)
			continue
		}
		if done {
			rep.Networks++
		}
	}
}

// What the collector owes a pod record.
const (
	teardownNone    = iota
	teardownNetwork // stopped, its CNI DEL failed: the network goes, the record stays
	teardownAll     // removing or abandoned: the network, then the record
)

func sandboxTeardown(sb *store.Sandbox, afterStart bool) int {
	abandoned := sb.Creating && (afterStart || time.Since(time.Unix(0, sb.CreatedAt)) > staleCreate)
	switch {
	case sb.Removing || abandoned:
		return teardownAll
	case sb.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY && sb.Net != nil && !sb.NetDown:
		return teardownNetwork
	}
	return teardownNone
}

// finishSandbox decides again under the pod's lock (a call may have
// finished the pod meanwhile) and does what is owed; done says whether
// it did anything.
func (r *Collector) finishSandbox(ctx context.Context, id string, afterStart bool) (bool, error) {
	defer r.Locks.Lock(id)()
	sb, err := r.Store.Sandbox(id)
	if err != nil {
		return false, nil
	}
	switch sandboxTeardown(sb, afterStart) {
	case teardownNetwork:
		return true, r.Networks.Teardown(ctx, sb)
	case teardownAll:
		if ctrs, err := r.Store.ContainersOf(id); err != nil || len(ctrs) > 0 {
			return false, err // its VM goes first (finishTeardowns)
		}
		return true, r.FinishSandboxRemoval(ctx, sb)
	}
	return false, nil
}

// collectNamespaces removes this instance's pod namespaces that no VM pod
// owns (the store was lost), with CNI DEL, and reports other instances'.
func (r *Collector) collectNamespaces(ctx context.Context, rep *GCReport) {
	if r.Net == nil {
		return
	}
	own, foreign, err := r.Net.Namespaces()
	if err != nil {
		r.Log.Warn("cannot list VM pod namespaces", "err", err)
		return
	}
	rep.ForeignNetns = foreign
	for id := range own {
		if _, err := r.Store.Sandbox(id); !errdefs.IsNotFound(err) {
			continue // owned, or its record unreadable: not an orphan
		}
		unlock := r.Locks.Lock(id)
		err := r.Net.Collect(ctx, id)
		unlock()
		if err != nil {
			rep.Pending++
			r.Log.Warn("orphan VM pod namespace not removed yet", "sandbox", id, "err", err)
			continue
		}
		r.Log.Info("removed an orphan VM pod network", "sandbox", id)
		rep.Networks++
	}
}

// collectNetworks is the network part of a collector pass; orphans says
// whether namespaces without a record may go (libvirt was asked first).
// Pod records are finished with or without a pod network (one abandoned
// in RunPodSandbox is owed its removal either way).
func (r *Collector) collectNetworks(rep *GCReport, afterStart, orphans bool) {
	ctx, cancel := context.WithTimeout(context.Background(), core.NetworkGCTimeout)
	defer cancel()
	if afterStart {
		r.markDeadSandboxes()
	}
	r.finishSandboxes(ctx, rep, afterStart)
	if orphans && r.Net != nil {
		r.collectNamespaces(ctx, rep)
		r.collectCNI(ctx)
	}
}

// collectCNI tells the network's plugins which attachments live (CNI
// GC), once the records are settled: whatever a plugin holds for any
// other (an address leaked by a DEL that never came) is released. A
// network older than CNI 1.1 gets no GC (podnet logs it once).
func (r *Collector) collectCNI(ctx context.Context) {
	n, err := r.Net.GC(ctx, r.Networks.LiveAttachments)
	if err != nil {
		r.Log.Warn("CNI GC not done in this pass", "err", err)
		return
	}
	r.Log.Debug("CNI GC", "live_attachments", n)
}

// adoptNetwork gives an adopted pod (found running, record lost) the
// namespace it still has, so its removal runs CNI DEL for it. Its address
// is unknown (not reported); the config is the conf dir's current one.
func (r *Collector) adoptNetwork(sb *store.Sandbox) {
	if r.Net == nil {
		return
	}
	own, _, err := r.Net.Namespaces()
	if err != nil || own[sb.ID] == "" {
		return
	}
	if a, err := r.Net.Plan(sb.ID); err == nil {
		sb.Net = a
	}
}
