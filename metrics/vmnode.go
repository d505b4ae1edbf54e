package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crimux/crimux/vmtypes"
)

// Node-wide series of the VM runtime's bounds: how full its guest-agent
// call caps, its templates and its image cache are, and how many guests
// are stuck booting. Read from the VM runtime at every scrape, from its
// own state (no libvirtd call); no per-VM label, so their number is
// fixed.
var (
	agentInFlightDesc = prometheus.NewDesc(namespace+"_agent_calls_in_flight",
		"Guest-agent calls holding a slot now, all VMs together.", nil, nil)
	agentWaitingDesc = prometheus.NewDesc(namespace+"_agent_calls_waiting",
		"Guest-agent calls waiting in crimux for a slot (a cap is full).", nil, nil)
	agentCapDesc = prometheus.NewDesc(namespace+"_agent_calls_cap",
		"Cap on the guest-agent calls in flight, per VM (scope=vm) and for the node (scope=node).",
		[]string{"scope"}, nil)
	templatesDesc = prometheus.NewDesc(namespace+"_templates",
		"VM templates by state (making, ready, failed); absent when templates are off.", []string{"state"}, nil)
	templateBytesDesc = prometheus.NewDesc(namespace+"_template_bytes",
		"Bytes the VM templates' files take on disk; absent when templates are off.", nil, nil)
	imageCacheBytesDesc = prometheus.NewDesc(namespace+"_image_cache_bytes",
		"Bytes the VM image cache takes on disk (allocated).", nil, nil)
	imageCacheEntriesDesc = prometheus.NewDesc(namespace+"_image_cache_entries",
		"Images whose files are in the VM image cache.", nil, nil)
	bootsStuckDesc = prometheus.NewDesc(namespace+"_guest_boots_stuck",
		"Running VMs whose guest showed no sign of an operating system in time (GuestNotBooted).", nil, nil)
)

// vmNodeCollector reads the VM runtime's node-wide state at every scrape;
// a nil sample (no VM runtime in force) exports nothing.
type vmNodeCollector struct {
	sample func(ctx context.Context) (*vmtypes.NodeSample, error)
}

func (c *vmNodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{agentInFlightDesc, agentWaitingDesc, agentCapDesc, templatesDesc,
		templateBytesDesc, imageCacheBytesDesc, imageCacheEntriesDesc, bootsStuckDesc} {
		ch <- d
	}
}

func (c *vmNodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), vmScrapeTimeout)
	defer cancel()
	s, err := withTimeout(func() (*vmtypes.NodeSample, error) { return c.sample(ctx) })
	if err != nil {
		ch <- prometheus.NewInvalidMetric(agentInFlightDesc, err)
		return
	}
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(agentInFlightDesc, float64(s.AgentCallsInFlight))
	gauge(agentWaitingDesc, float64(s.AgentCallsWaiting))
	gauge(agentCapDesc, float64(s.AgentCapPerVM), "vm")
	gauge(agentCapDesc, float64(s.AgentCapPerNode), "node")
	if s.TemplatesOn {
		gauge(templatesDesc, float64(s.Templates.Making), "making")
		gauge(templatesDesc, float64(s.Templates.Ready), "ready")
		gauge(templatesDesc, float64(s.Templates.Failed), "failed")
		gauge(templateBytesDesc, float64(s.TemplateBytes))
	}
	gauge(imageCacheBytesDesc, float64(s.ImageCacheBytes))
	gauge(imageCacheEntriesDesc, float64(s.ImageCacheEntries))
	gauge(bootsStuckDesc, float64(s.GuestBootsStuck))
}
