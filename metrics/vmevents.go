package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The label values of the VM runtime's event counters. Each label set is
// exported at 0 from the start, so a rate over it is defined before the
// first event.
var (
	// AgentCaps are the caps a guest-agent call is refused by: its VM's
	// (libvirt.agent_calls_per_vm) or the node's.
	AgentCaps = []string{"vm", "node"}
	// AgentRefusals are why: "busy" while the calls filling the cap are
	// being answered, "stuck" when the VM's agent answered none lately.
	AgentRefusals = []string{"busy", "stuck"}
	// TemplateClones are how a VM that asked for its template started.
	TemplateClones = []string{"restored", "booted"}
	// TemplateMakings are how a template's making ended: "cancelled"
	// when no pod asked for it any more.
	TemplateMakings = []string{"ready", "failed", "cancelled"}
	// GuestBoots are what the boot watch found of a cold-booted guest:
	// "booted" in time, "stuck" past the timeout, "late" booted after it
	// was reported stuck (counted stuck before).
	GuestBoots = []string{"booted", "late", "stuck"}
)

// agentWaitBuckets span a call let through at once (microseconds) to
// one refused after the caps' wait (3 s by default, configurable).
var agentWaitBuckets = []float64{.0001, .0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// vmEvents are what the VM runtime counts as it happens: guest-agent
// calls held at the caps, templates used and made, guests booted.
type vmEvents struct {
	agentRefused    *prometheus.CounterVec
	agentWait       prometheus.Histogram
	templateClones  *prometheus.CounterVec
	templateMakings *prometheus.CounterVec
	guestBoots      *prometheus.CounterVec
}

func newVMEvents() vmEvents {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	e := vmEvents{
		agentRefused: counter("agent_calls_refused_total",
			"Guest-agent calls refused after waiting for a slot, by the cap that was full (vm, node) and why (busy, stuck).",
			"cap", "reason"),
		agentWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "agent_call_wait_seconds",
			Help:    "How long each guest-agent call waited in crimux for a slot, let through or refused.",
			Buckets: agentWaitBuckets,
		}),
		templateClones: counter("template_clones_total",
			"VMs that asked to start from their template (vm-instant, crimux.io/start: template), by how they started (restored, booted).",
			"result"),
		templateMakings: counter("template_makings_total",
			"Template makings that ended, by result (ready, failed, cancelled: no pod asked for it any more).", "result"),
		guestBoots: counter("guest_boots_total",
			"Cold-booted guests the boot watch saw: booted in time, stuck past the timeout, or booted late (after stuck).", "result"),
	}
	for _, c := range AgentCaps {
		for _, r := range AgentRefusals {
			e.agentRefused.WithLabelValues(c, r)
		}
	}
	for vec, values := range map[*prometheus.CounterVec][]string{
		e.templateClones: TemplateClones, e.templateMakings: TemplateMakings, e.guestBoots: GuestBoots} {
		for _, v := range values {
			vec.WithLabelValues(v)
		}
	}
	return e
}

func (e vmEvents) collectors() []prometheus.Collector {
	return []prometheus.Collector{e.agentRefused, e.agentWait, e.templateClones, e.templateMakings, e.guestBoots}
}

// AgentCallRefused counts a guest-agent call refused because whichCap (one of
// AgentCaps) stayed full, for reason (one of AgentRefusals).
func (m *Metrics) AgentCallRefused(whichCap, reason string) {
	m.agentRefused.WithLabelValues(whichCap, reason).Inc()
}

// AgentCallWaited records how long a guest-agent call waited for a slot.
func (m *Metrics) AgentCallWaited(d time.Duration) {
	m.agentWait.Observe(d.Seconds())
}

// TemplateClone counts a VM that asked for its template and started with
// result (one of TemplateClones).
func (m *Metrics) TemplateClone(result string) {
	m.templateClones.WithLabelValues(result).Inc()
}

// TemplateMakingEnded counts a template making that ended with result
// (one of TemplateMakings).
func (m *Metrics) TemplateMakingEnded(result string) {
	m.templateMakings.WithLabelValues(result).Inc()
}

// GuestBoot counts what the boot watch found of a guest (one of
// GuestBoots).
func (m *Metrics) GuestBoot(result string) {
	m.guestBoots.WithLabelValues(result).Inc()
}
