package vmtypes

import "context"

// NodeSampler is a VM runtime that reports how full its node-wide bounds
// are, for metrics (crimux_agent_calls_*, crimux_templates,
// crimux_image_cache_*, crimux_guest_boots_stuck), read at every scrape.
// The figures are the runtime's own state: reading them asks libvirtd
// nothing and waits on no lock held across a slow call.
type NodeSampler interface {
	NodeSample(ctx context.Context) (NodeSample, error)
}

// NodeSample is the node-wide state of a VM runtime's bounds.
type NodeSample struct {
	// AgentCallsInFlight are the guest-agent calls holding a slot now,
	// all VMs together; AgentCallsWaiting those waiting in line for one.
	AgentCallsInFlight, AgentCallsWaiting int
	// AgentCapPerVM and AgentCapPerNode are the caps in force
	// (libvirt.agent_calls_per_vm and _per_node, defaults applied).
	AgentCapPerVM, AgentCapPerNode int

	// TemplatesOn: the runtime makes templates (libvirt.templates); the
	// template figures are zero otherwise.
	TemplatesOn bool
	// Templates counts the templates by state: making, ready, failed.
	Templates TemplateCounts
	// TemplateBytes is what the templates' files take on disk.
	TemplateBytes uint64

	// ImageCacheBytes is what the VM image cache takes on disk (its
	// extractions in progress included); ImageCacheEntries the images
	// in it.
	ImageCacheBytes   uint64
	ImageCacheEntries int

	// GuestBootsStuck are the running VMs whose guest the boot watch
	// reports stuck in its firmware or boot loader now.
	GuestBootsStuck int
}

// TemplateCounts are templates by state.
type TemplateCounts struct {
	Making, Ready, Failed int
}
