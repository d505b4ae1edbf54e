package nodeagent

import (
	"maps"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// sentTTL bounds how long a patch the informer has not shown yet is
// trusted over the informer's copy of the pod, when resource versions
// cannot tell (an API server whose resource versions are not numbers).
const sentTTL = time.Minute

// sentPatches remembers, per pod UID, the annotations the last successful
// patch wrote, until the informer shows a copy of the pod at least as new
// as the patch's result. A pod event queued before the patch's own
// (kubelet updating the status, say) would otherwise show the agent the
// pod without them, and it would patch, and announce, what it has just
// written. Used by the one worker only.
type sentPatch struct {
	changes map[string]*string
	// version is the resource version the patch produced; 0 if unknown.
	version uint64
	at      time.Time
}

type sentPatches struct {
	byUID map[types.UID]sentPatch
	now   func() time.Time
}

func newSentPatches(now func() time.Time) *sentPatches {
	return &sentPatches{byUID: map[types.UID]sentPatch{}, now: now}
}

// remember notes a successful patch and the resource version it produced.
func (s *sentPatches) remember(uid types.UID, resourceVersion string, changes map[string]*string) {
	s.byUID[uid] = sentPatch{changes: changes, version: parseVersion(resourceVersion), at: s.now()}
}

// forget drops what is remembered of a pod (deleted).
func (s *sentPatches) forget(uid types.UID) { delete(s.byUID, uid) }

// annotations returns a pod's annotations as the agent last wrote them:
// the informer's copy (at resourceVersion), with the last patch laid over
// it while that copy is older than the patch. Resource versions are
// opaque to clients in principle; every API server backed by etcd makes
// them increasing integers, and where one does not, the copy counts as
// new once it carries the patch or sentTTL has passed.
func (s *sentPatches) annotations(uid types.UID, resourceVersion string, seen map[string]string) map[string]string {
	sent, ok := s.byUID[uid]
	if !ok {
		return seen
	}
	if s.caughtUp(sent, resourceVersion, seen) {
		delete(s.byUID, uid)
		return seen
	}
	out := maps.Clone(seen)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range sent.changes {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

// caughtUp: the informer's copy is as new as the patch, or newer (so a
// user's change made since the patch shows, even one undoing it).
func (s *sentPatches) caughtUp(sent sentPatch, resourceVersion string, seen map[string]string) bool {
	if v := parseVersion(resourceVersion); v != 0 && sent.version != 0 {
		return v >= sent.version
	}
	return applied(seen, sent.changes) || s.now().Sub(sent.at) > sentTTL
}

// parseVersion reads a resource version as the integer etcd makes it; 0
// if it is not one.
func parseVersion(resourceVersion string) uint64 {
	v, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// applied reports whether annotations carry every change.
func applied(annotations map[string]string, changes map[string]*string) bool {
	for k, v := range changes {
		cur, ok := annotations[k]
		if v == nil && ok || v != nil && (!ok || cur != *v) {
			return false
		}
	}
	return true
}
