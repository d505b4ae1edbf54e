package nodeagent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const (
	running   = vmv1.PowerState_POWER_STATE_RUNNING
	paused    = vmv1.PowerState_POWER_STATE_PAUSED
	shutdown  = vmv1.PowerState_POWER_STATE_SHUTDOWN
	hibernate = vmv1.PowerState_POWER_STATE_HIBERNATE
)

func TestPowerStateAppliedWhenDifferent(t *testing.T) {
	tests := []struct {
		from vmv1.PowerState
		want string
	}{
		{running, "Paused"},
		{running, "Shutdown"},
		{running, "Hibernate"},
		{paused, "Running"},
		{shutdown, "Running"},
		{hibernate, "Running"},
	}
	for _, tt := range tests {
		t.Run(powerStateName(tt.from)+" to "+tt.want, func(t *testing.T) {
			h := newHarness(t, tt.from, map[string]string{kubeapi.AnnotationPowerState: tt.want})
			again, patches, events := h.pass()
			if got, want := h.vms.actions(), []string{"SetPowerState " + tt.want}; !slices.Equal(got, want) {
				t.Fatalf("calls = %q, want %q", got, want)
			}
			if again || len(patches) != 1 || h.pod.Annotations[kubeapi.AnnotationObservedPowerState] != tt.want {
				t.Errorf("again %v, patches %v: observed %q, want one patch saying %s", again, patches, h.pod.Annotations[kubeapi.AnnotationObservedPowerState], tt.want)
			}
			if len(events) != 1 || events[0].reason != ReasonPowerStateChanged || events[0].eventType != corev1.EventTypeNormal ||
				!strings.Contains(events[0].message, powerStateName(tt.from)+" -> "+tt.want) {
				t.Errorf("events = %+v, want one PowerStateChanged %s -> %s", events, powerStateName(tt.from), tt.want)
			}

			// The pod updated with the patch comes back: nothing to do.
			h.vms.reset()
			_, patches, events = h.pass()
			if a := h.vms.actions(); len(a) > 0 || len(patches) > 0 || len(events) > 0 {
				t.Errorf("second pass: calls %q, patches %v, events %v; want none", a, patches, events)
			}
		})
	}
}

func TestPowerStateNotAppliedWhenEqual(t *testing.T) {
	for _, state := range []vmv1.PowerState{running, paused, shutdown, hibernate} {
		name := powerStateName(state)
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, state, map[string]string{kubeapi.AnnotationPowerState: name})
			_, patches, events := h.pass()
			if a := h.vms.actions(); len(a) > 0 || len(events) > 0 {
				t.Errorf("calls %q, events %v; want none", a, events)
			}
			// Only the observed state is written, once, with the VM's
			// (no) snapshots listed on the pass that first sees the pod.
			if len(patches) != 1 || len(patches[0]) != 2 || *patches[0][kubeapi.AnnotationObservedPowerState] != name ||
				*patches[0][kubeapi.AnnotationSnapshots] != "[]" {
				t.Errorf("patches = %v, want observed-power-state %s and snapshots [] alone", patches, name)
			}
			if _, patches, _ = h.pass(); len(patches) > 0 {
				t.Errorf("second pass patched %v", patches)
			}
		})
	}
}

// Without crimux.io/power-state the agent never changes the power state,
// even with other requests on the pod.
func TestPowerStateNeverActedOnWhenAbsent(t *testing.T) {
	h := newHarness(t, paused, map[string]string{kubeapi.AnnotationSnapshotRequest: "s1"})
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"CreateSnapshot s1"}) {
		t.Errorf("calls = %q, want the snapshot alone", got)
	}
	if h.pod.Annotations[kubeapi.AnnotationObservedPowerState] != "Paused" {
		t.Errorf("observed = %q, want Paused (kept current on a pod with requests)", h.pod.Annotations[kubeapi.AnnotationObservedPowerState])
	}
}

func TestInvalidPowerStateReportedNotApplied(t *testing.T) {
	for _, value := range []string{"Sleeping", "running", "", " Running"} {
		t.Run(fmt.Sprintf("%q", value), func(t *testing.T) {
			h := newHarness(t, paused, map[string]string{kubeapi.AnnotationPowerState: value})
			again, _, events := h.pass()
			if a := h.vms.actions(); len(a) > 0 || again {
				t.Fatalf("calls %q, again %v; an invalid value must change nothing", a, again)
			}
			msg := h.pod.Annotations[kubeapi.AnnotationPowerStateError]
			if !strings.Contains(msg, kubeapi.AnnotationPowerState) || !strings.Contains(msg, fmt.Sprintf("%q", value)) {
				t.Errorf("power-state-error = %q, want it to name the annotation and the value", msg)
			}
			if h.pod.Annotations[kubeapi.AnnotationObservedPowerState] != "Paused" {
				t.Errorf("observed = %q, want Paused", h.pod.Annotations[kubeapi.AnnotationObservedPowerState])
			}
			if len(events) != 1 || events[0].reason != ReasonInvalidPowerState || events[0].eventType != corev1.EventTypeWarning {
				t.Errorf("events = %+v, want one Warning InvalidPowerState", events)
			}
			if _, patches, events := h.pass(); len(patches) > 0 || len(events) > 0 {
				t.Errorf("second pass: patches %v, events %v; a refusal is reported once", patches, events)
			}

			// A valid value clears the error once applied.
			h.annotate(kubeapi.AnnotationPowerState, ptr("Running"))
			h.pass()
			if e, ok := h.pod.Annotations[kubeapi.AnnotationPowerStateError]; ok {
				t.Errorf("power-state-error = %q after a valid value was applied; want it removed", e)
			}
		})
	}
}

func TestPowerStateRefusedReported(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationPowerState: "Hibernate"})
	h.vms.setErr = fmt.Errorf("vm %q: cannot hibernate with a host device: %w", "default/vm1", errdefs.ErrFailedPrecondition)
	again, _, events := h.pass()
	if again {
		t.Error("a refusal asks for a retry with backoff; it is retried at the next pod change or resync")
	}
	msg := h.pod.Annotations[kubeapi.AnnotationPowerStateError]
	if !strings.Contains(msg, "crimux.io/power-state: Hibernate: ") || !strings.Contains(msg, "host device") {
		t.Errorf("power-state-error = %q, want the annotation, the value and the VM API's reason", msg)
	}
	if h.pod.Annotations[kubeapi.AnnotationObservedPowerState] != "Running" {
		t.Errorf("observed = %q, want Running (unchanged)", h.pod.Annotations[kubeapi.AnnotationObservedPowerState])
	}
	if got := reasons(events); !slices.Equal(got, []string{ReasonPowerStateFailed}) || events[0].eventType != corev1.EventTypeWarning {
		t.Errorf("events = %+v, want one Warning PowerStateFailed", events)
	}

	// Level-triggered: tried again on the next pass, reported once.
	h.vms.reset()
	_, patches, events := h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"SetPowerState Hibernate"}) || len(patches) > 0 || len(events) > 0 {
		t.Errorf("second pass: calls %q, patches %v, events %v; want the call again, nothing reported again", got, patches, events)
	}

	h.vms.setErr = nil
	_, patches, events = h.pass()
	if len(patches) != 1 || patches[0][kubeapi.AnnotationPowerStateError] != nil || *patches[0][kubeapi.AnnotationObservedPowerState] != "Hibernate" {
		t.Errorf("once applied: patches %v, want the error removed (null) and Hibernate observed", patches)
	}
	if _, ok := patches[0][kubeapi.AnnotationPowerStateError]; !ok {
		t.Errorf("patch %v does not remove power-state-error", patches[0])
	}
	if got := reasons(events); !slices.Equal(got, []string{ReasonPowerStateChanged}) {
		t.Errorf("events = %q, want PowerStateChanged", got)
	}
}

// Removing crimux.io/power-state withdraws its error too.
func TestPowerStateErrorRemovedWithTheAnnotation(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationPowerState: "Off", kubeapi.AnnotationRebootRequest: "t1"})
	h.pass()
	h.annotate(kubeapi.AnnotationPowerState, nil)
	h.pass()
	if e, ok := h.pod.Annotations[kubeapi.AnnotationPowerStateError]; ok {
		t.Errorf("power-state-error = %q after the annotation was removed", e)
	}
}

func TestPowerStateParse(t *testing.T) {
	for name, want := range map[string]vmv1.PowerState{"Running": running, "Paused": paused, "Shutdown": shutdown, "Hibernate": hibernate} {
		got, ok := parsePowerState(name)
		if !ok || got != want || powerStateName(got) != name {
			t.Errorf("parsePowerState(%q) = %v, %v; name back %q", name, got, ok, powerStateName(got))
		}
	}
	if _, ok := parsePowerState("POWER_STATE_RUNNING"); ok {
		t.Error("the proto's enum name is not an annotation value")
	}
	if powerStateName(vmv1.PowerState_POWER_STATE_UNSPECIFIED) != "" {
		t.Error("UNSPECIFIED has no annotation value")
	}
}

var errTest = errors.New("test")
