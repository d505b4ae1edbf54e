package config

import "fmt"

// Upper bounds of the caps a guest meets: libvirtd serves 20 requests at
// once by default (max_workers), so more agent calls in flight than this
// are a typo, not a tuning; qcow2 holds at most 65536 snapshots, and each
// one of a running VM holds its RAM.
const (
	maxAgentCalls = 256
	maxSnapshots  = 1024
)

// validateGuestCaps checks the caps of what a guest can make crimux
// spend: agent calls in flight, snapshots.
func validateGuestCaps(l Libvirt) []error {
	var errs []error
	if l.AgentCallsPerVM < 1 || l.AgentCallsPerVM > maxAgentCalls {
		errs = append(errs, fmt.Errorf("libvirt.agent_calls_per_vm: %d must be between 1 and %d", l.AgentCallsPerVM, maxAgentCalls))
	}
	if l.AgentCallsPerNode < 1 || l.AgentCallsPerNode > maxAgentCalls {
		errs = append(errs, fmt.Errorf("libvirt.agent_calls_per_node: %d must be between 1 and %d", l.AgentCallsPerNode, maxAgentCalls))
	} else if l.AgentCallsPerVM > l.AgentCallsPerNode {
		errs = append(errs, fmt.Errorf("libvirt.agent_calls_per_vm: %d must not exceed libvirt.agent_calls_per_node (%d)", l.AgentCallsPerVM, l.AgentCallsPerNode))
	}
	if l.MaxSnapshotsPerVM < 1 || l.MaxSnapshotsPerVM > maxSnapshots {
		errs = append(errs, fmt.Errorf("libvirt.max_snapshots_per_vm: %d must be between 1 and %d", l.MaxSnapshotsPerVM, maxSnapshots))
	}
	return errs
}
