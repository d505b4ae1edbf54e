package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// publishSnapshots lists the VM's snapshots in crimux.io/snapshots
// (kubeapi/snapshots.go has the format) when the pod has no list yet,
// when this agent has not listed them since it started (snapshots may
// have come or gone meanwhile: this is the pass that first sees the pod),
// or when a request of this pass changed them. Otherwise the list stands:
// one ListSnapshots per change, not per pass. A failed list changes
// nothing on the pod and is tried again on the pod's next pass.
func (r *reconciler) publishSnapshots(ctx context.Context, p *pass) {
	if ctx.Err() != nil {
		return // stopping: nothing is written
	}
	if p.snapshotsChanged {
		delete(r.listed, p.pod.UID)
	}
	if _, shown := p.annotations[kubeapi.AnnotationSnapshots]; shown && r.listed[p.pod.UID] {
		return
	}
	resp, err := r.vms.ListSnapshots(ctx, &vmv1.ListSnapshotsRequest{Vm: p.ref})
	if err != nil {
		p.log.Warn("node agent: snapshots not listed on the pod; listed on its next pass", "annotation", kubeapi.AnnotationSnapshots, "err", err)
		return
	}
	value, err := snapshotsValue(resp.GetSnapshots())
	if err != nil {
		p.log.Error("node agent: snapshots not listed on the pod", "annotation", kubeapi.AnnotationSnapshots, "err", err)
		return
	}
	if n := len(resp.GetSnapshots()); n > kubeapi.MaxListedSnapshots {
		p.log.Warn("node agent: the VM has more snapshots than the pod lists; it lists the newest", "snapshots", n, "listed", kubeapi.MaxListedSnapshots)
	}
	p.set(kubeapi.AnnotationSnapshots, &value)
	p.snapshotsListed = true
}

// snapshotsPublished notes, once the pass's patch is written, that the
// pod's list is this agent's and current.
func (r *reconciler) snapshotsPublished(p *pass) {
	if !p.snapshotsListed {
		return
	}
	if r.listed == nil {
		r.listed = map[types.UID]bool{}
	}
	r.listed[p.pod.UID] = true
}

// snapshotsValue is crimux.io/snapshots of snaps, which the VM API lists
// oldest first: the newest kubeapi.MaxListedSnapshots, descriptions cut.
func snapshotsValue(snaps []*vmv1.Snapshot) (string, error) {
	if len(snaps) > kubeapi.MaxListedSnapshots {
		snaps = snaps[len(snaps)-kubeapi.MaxListedSnapshots:]
	}
	entries := make([]kubeapi.SnapshotEntry, 0, len(snaps))
	for _, s := range snaps {
		e := kubeapi.SnapshotEntry{Name: s.GetName(), Description: cutDescription(s.GetDescription())}
		if at := s.GetCreatedAt(); at > 0 {
			e.Created = time.Unix(at, 0).UTC().Format(time.RFC3339)
		}
		entries = append(entries, e)
	}
	// An encoder, not json.Marshal: no HTML escaping (a '<' of a
	// description stays one byte, not six).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(entries); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// cutDescription is a description as the list carries it: valid UTF-8,
// control characters (newlines included) made spaces, at most
// kubeapi.MaxSnapshotDescription bytes, ending "…" when cut.
func cutDescription(d string) string {
	d = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(d, "\uFFFD"))
	if len(d) <= kubeapi.MaxSnapshotDescription {
		return d
	}
	const ellipsis = "…"
	cut := kubeapi.MaxSnapshotDescription - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(d[cut]) {
		cut--
	}
	return d[:cut] + ellipsis
}
