package libvirt

import "time"

// Live are the settings a running VM runtime takes on a config reload:
// the libvirt keys of config.LiveKeys. Every other libvirt key is the
// runtime's as it was built until crimux restarts.
type Live struct {
	// AgentCalls are libvirt.agent_calls_per_vm and _per_node.
	AgentCalls AgentCaps
	// GuestBootTimeout is libvirt.guest_boot_timeout.
	GuestBootTimeout time.Duration
}

// Reconfigure applies l: the guest-agent caps to the calls made from now
// on (calls in flight keep their slots; a raised cap lets waiting calls
// through at once), the guest boot timeout to every watch, those running
// included.
func (rt *Runtime) Reconfigure(l Live) {
	rt.conn.UpdateAgentCaps(l.AgentCalls)
	rt.core.Boots.SetTimeout(l.GuestBootTimeout)
}

// Reconfigurer is the ability a config reload hands the live libvirt
// keys to (the VM runtime's registry backend has it).
type Reconfigurer interface{ Reconfigure(Live) }

var _ Reconfigurer = (*backend)(nil)

// Reconfigure is the runtime's (Runtime.Reconfigure).
func (b *backend) Reconfigure(l Live) { b.rt.Reconfigure(l) }
