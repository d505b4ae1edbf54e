package libvirt

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// networkGCTimeout bounds the CNI calls of one collector pass.
const networkGCTimeout = 2 * time.Minute

// finishSandboxes converges VM pods the store says are on their way out
// or were never finished: Removing ones (a removal whose network teardown
// failed), Creating ones abandoned by a crash or a failed RunPodSandbox,
// and stopped ones whose CNI DEL failed. Each gets CNI DEL until it
// succeeds; then the record goes (or, for a stopped pod, is marked down).
func (r *Runtime) finishSandboxes(ctx context.Context, rep *GCReport, afterStart bool) {
	recs, err := r.store.sandboxes()
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
			r.log.Warn("VM pod teardown still failing", "sandbox", sb.ID, "err", err)
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

func sandboxTeardown(sb *sandboxRecord, afterStart bool) int {
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
func (r *Runtime) finishSandbox(ctx context.Context, id string, afterStart bool) (bool, error) {
	defer r.locks.lock(id)()
	sb, err := r.store.sandbox(id)
	if err != nil {
		return false, nil
	}
	switch sandboxTeardown(sb, afterStart) {
	case teardownNetwork:
		return true, r.teardownNetwork(ctx, sb)
	case teardownAll:
		if ctrs, err := r.store.containersOf(id); err != nil || len(ctrs) > 0 {
			return false, err // its VM goes first (finishTeardowns)
		}
		return true, r.finishSandboxRemoval(ctx, sb)
	}
	return false, nil
}

// collectNamespaces removes this instance's pod namespaces that no VM pod
// owns (the store was lost), with CNI DEL, and reports other instances'.
func (r *Runtime) collectNamespaces(ctx context.Context, rep *GCReport) {
	if r.net == nil {
		return
	}
	own, foreign, err := r.net.Namespaces()
	if err != nil {
		r.log.Warn("cannot list VM pod namespaces", "err", err)
		return
	}
	rep.ForeignNetns = foreign
	for id := range own {
		if _, err := r.store.sandbox(id); err == nil {
			continue
		}
		unlock := r.locks.lock(id)
		err := r.net.Collect(ctx, id)
		unlock()
		if err != nil {
			rep.Pending++
			r.log.Warn("orphan VM pod namespace not removed yet", "sandbox", id, "err", err)
			continue
		}
		r.log.Info("removed an orphan VM pod network", "sandbox", id)
		rep.Networks++
	}
}

// collectNetworks is the network part of a collector pass; orphans says
// whether namespaces without a record may go (libvirt was asked first).
func (r *Runtime) collectNetworks(rep *GCReport, afterStart, orphans bool) {
	if r.net == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), networkGCTimeout)
	defer cancel()
	r.finishSandboxes(ctx, rep, afterStart)
	if orphans {
		r.collectNamespaces(ctx, rep)
	}
}

// adoptNetwork gives an adopted pod (found running, record lost) the
// namespace it still has, so its removal runs CNI DEL for it. Its address
// is unknown (not reported); the config is the conf dir's current one.
func (r *Runtime) adoptNetwork(sb *sandboxRecord) {
	if r.net == nil {
		return
	}
	own, _, err := r.net.Namespaces()
	if err != nil || own[sb.ID] == "" {
		return
	}
	if a, err := r.net.Plan(sb.ID); err == nil {
		sb.Net = a
	}
}
