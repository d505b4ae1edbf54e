package nodeagent

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/kubeapi"
)

func TestSentPatchesOverlay(t *testing.T) {
	const uid = types.UID("6f1c2a5e-0000-4000-8000-000000000002")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	result := map[string]*string{kubeapi.AnnotationRebootResult: ptr("t1: rebooted (soft)")}

	for _, tc := range []struct {
		name      string
		patchedAt string // the patch's resulting resource version
		seenAt    string // the informer copy's
		seen      map[string]string
		later     time.Duration
		want      string // the result annotation the agent sees; "" absent
	}{
		{"older copy: the patch laid over it", "12", "11", nil, 0, "t1: rebooted (soft)"},
		{"the patch's own copy", "12", "12", map[string]string{kubeapi.AnnotationRebootResult: "t1: rebooted (soft)"}, 0, "t1: rebooted (soft)"},
		{"a newer copy, the user removed the result", "12", "13", nil, 0, ""},
		{"a newer copy, the user changed it", "12", "14", map[string]string{kubeapi.AnnotationRebootResult: "mine"}, 0, "mine"},
		{"opaque versions: overlay until the copy carries it", "x12", "x13", nil, 0, "t1: rebooted (soft)"},
		{"opaque versions: trusted for sentTTL only", "x12", "x13", nil, sentTTL + time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			s := newSentPatches(clock)
			s.remember(uid, tc.patchedAt, result)
			now = now.Add(tc.later)
			got, ok := s.annotations(uid, tc.seenAt, tc.seen)[kubeapi.AnnotationRebootResult]
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("result = %q (present %v), want %q", got, ok, tc.want)
			}
		})
	}
}
