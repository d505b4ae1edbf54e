package libvirt

import (
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
)

// Live are the settings a running VM runtime takes on a config reload:
// the libvirt keys of config.LiveKeys. Every other libvirt key is the
// runtime's as it was built until crimux restarts.
type Live struct {
	// AgentCalls are libvirt.agent_calls_per_vm and _per_node.
	AgentCalls AgentCaps
	// GuestBootTimeout is libvirt.guest_boot_timeout.
	GuestBootTimeout time.Duration
	// MaxSnapshotsPerVM is libvirt.max_snapshots_per_vm.
	MaxSnapshotsPerVM int
	// GCInterval is libvirt.gc_interval.
	GCInterval time.Duration
	// Templates are libvirt.template_max_making, _max_kept, _retry_after
	// and _cpu_millis.
	Templates instant.Limits
	// Migration are libvirt.migration's bandwidth_mib,
	// completion_timeout_per_gib, progress_timeout and target_timeout.
	Migration migration.Tunables
}

// Reconfigure applies l: the guest-agent caps to the calls made from now
// on (calls in flight keep their slots; a raised cap lets waiting calls
// through at once), the guest boot timeout to every watch, those running
// included; the snapshot cap to the next snapshot; the collector's
// period from its next pass; the template bounds to the next making (a
// warm waiting for a turn gets one at once if the cap was raised); the
// migration tunables to the next migration.
func (rt *Runtime) Reconfigure(l Live) {
	rt.conn.UpdateAgentCaps(l.AgentCalls)
	rt.core.Boots.SetTimeout(l.GuestBootTimeout)
	rt.core.SetMaxSnapshots(l.MaxSnapshotsPerVM)
	rt.gc.SetInterval(l.GCInterval)
	if rt.instant.Maker != nil {
		rt.instant.Maker.SetLimits(l.Templates)
	}
	rt.core.Migration.SetTunables(l.Migration)
}

// Reconfigurer is the ability a config reload hands the live libvirt
// keys to (the VM runtime's registry backend has it).
type Reconfigurer interface{ Reconfigure(Live) }

var _ Reconfigurer = (*backend)(nil)

// Reconfigure is the runtime's (Runtime.Reconfigure).
func (b *backend) Reconfigure(l Live) { b.rt.Reconfigure(l) }
