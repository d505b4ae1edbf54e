package config

import (
	"strings"
	"testing"
)

// TestGuestCapsDefaults: the caps a guest meets have defaults,
// printed by `crimux config default`, and keep the node's agent calls
// below libvirtd's 20 workers less the 5 requests of crimux's shared
// connection.
func TestGuestCapsDefaults(t *testing.T) {
	l := Default().Libvirt
	if l.AgentCallsPerVM != 4 || l.AgentCallsPerNode != 8 || l.MaxSnapshotsPerVM != 8 {
		t.Fatalf("defaults: agent calls %d per VM, %d per node, %d snapshots per VM; want 4, 8, 8",
			l.AgentCallsPerVM, l.AgentCallsPerNode, l.MaxSnapshotsPerVM)
	}
	if l.AgentCallsPerNode >= 20-5 {
		t.Fatalf("agent_calls_per_node %d leaves libvirtd too few workers", l.AgentCallsPerNode)
	}
	for _, key := range []string{"agent_calls_per_vm = 4", "agent_calls_per_node = 8", "max_snapshots_per_vm = 8"} {
		if !strings.Contains(DefaultTOML, "\n"+key+"\n") {
			t.Errorf("DefaultTOML does not set %s", key)
		}
	}
	got, err := Parse([]byte("[libvirt]\nagent_calls_per_vm = 2\nagent_calls_per_node = 6\nmax_snapshots_per_vm = 3\n"))
	if err != nil || got.Libvirt.AgentCallsPerVM != 2 || got.Libvirt.AgentCallsPerNode != 6 || got.Libvirt.MaxSnapshotsPerVM != 3 {
		t.Fatalf("Parse of the caps: %+v, %v", got.Libvirt, err)
	}
}

func TestGuestCapsValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Libvirt)
		wantErr string // "" valid
	}{
		{name: "one each", edit: func(l *Libvirt) { l.AgentCallsPerVM, l.AgentCallsPerNode, l.MaxSnapshotsPerVM = 1, 1, 1 }},
		{name: "no agent call per VM", edit: func(l *Libvirt) { l.AgentCallsPerVM = 0 }, wantErr: "libvirt.agent_calls_per_vm: 0 must be between 1 and"},
		{name: "no agent call per node", edit: func(l *Libvirt) { l.AgentCallsPerNode = 0 }, wantErr: "libvirt.agent_calls_per_node: 0 must be between 1 and"},
		{name: "per VM above per node", edit: func(l *Libvirt) { l.AgentCallsPerVM, l.AgentCallsPerNode = 5, 4 },
			wantErr: "libvirt.agent_calls_per_vm: 5 must not exceed libvirt.agent_calls_per_node (4)"},
		{name: "as many as libvirtd's workers", edit: func(l *Libvirt) { l.AgentCallsPerNode = 1000 }, wantErr: "libvirt.agent_calls_per_node: 1000 must be between 1 and"},
		{name: "no snapshot", edit: func(l *Libvirt) { l.MaxSnapshotsPerVM = 0 }, wantErr: "libvirt.max_snapshots_per_vm: 0 must be between 1 and"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c.Libvirt)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v, want valid", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}
