package metrics

import (
	"testing"
	"time"
)

// TestVMEventsStartAtZero: every label set of the VM runtime's event
// counters is exported at 0 before the first event.
func TestVMEventsStartAtZero(t *testing.T) {
	wantLines(t, scrape(t, New(Options{})),
		`crimux_agent_calls_refused_total{cap="vm",reason="busy"} 0`,
		`crimux_agent_calls_refused_total{cap="vm",reason="stuck"} 0`,
		`crimux_agent_calls_refused_total{cap="node",reason="busy"} 0`,
		`crimux_agent_calls_refused_total{cap="node",reason="stuck"} 0`,
		`crimux_agent_call_wait_seconds_count 0`,
		`crimux_template_clones_total{result="restored"} 0`,
		`crimux_template_clones_total{result="booted"} 0`,
		`crimux_template_makings_total{result="ready"} 0`,
		`crimux_template_makings_total{result="failed"} 0`,
		`crimux_template_makings_total{result="cancelled"} 0`,
		`crimux_guest_boots_total{result="booted"} 0`,
		`crimux_guest_boots_total{result="late"} 0`,
		`crimux_guest_boots_total{result="stuck"} 0`)
}

// TestVMEventsCounted: each event the runtime reports shows in its
// series, under its labels.
func TestVMEventsCounted(t *testing.T) {
	m := New(Options{})
	m.AgentCallRefused("vm", "stuck")
	m.AgentCallRefused("vm", "stuck")
	m.AgentCallRefused("node", "busy")
	m.AgentCallWaited(50 * time.Microsecond)
	m.AgentCallWaited(3 * time.Second)
	m.TemplateClone("restored")
	m.TemplateClone("booted")
	m.TemplateClone("booted")
	m.TemplateMakingEnded("ready")
	m.TemplateMakingEnded("cancelled")
	m.GuestBoot("booted")
	m.GuestBoot("stuck")
	m.GuestBoot("late")
	wantLines(t, scrape(t, m),
		`crimux_agent_calls_refused_total{cap="vm",reason="stuck"} 2`,
		`crimux_agent_calls_refused_total{cap="node",reason="busy"} 1`,
		`crimux_agent_calls_refused_total{cap="vm",reason="busy"} 0`,
		`crimux_agent_call_wait_seconds_bucket{le="0.0001"} 1`,
		`crimux_agent_call_wait_seconds_bucket{le="2.5"} 1`,
		`crimux_agent_call_wait_seconds_bucket{le="5"} 2`,
		`crimux_agent_call_wait_seconds_count 2`,
		`crimux_template_clones_total{result="restored"} 1`,
		`crimux_template_clones_total{result="booted"} 2`,
		`crimux_template_makings_total{result="ready"} 1`,
		`crimux_template_makings_total{result="failed"} 0`,
		`crimux_template_makings_total{result="cancelled"} 1`,
		`crimux_guest_boots_total{result="booted"} 1`,
		`crimux_guest_boots_total{result="late"} 1`,
		`crimux_guest_boots_total{result="stuck"} 1`)
}
