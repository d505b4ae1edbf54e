package virt

// AgentSlotStats are the slots' state at one moment, for metrics.
type AgentSlotStats struct {
	// InFlight are the calls holding a slot, all VMs together; Waiting
	// those in line for one.
	InFlight, Waiting int
	// Caps are the caps counted against.
	Caps AgentCaps
}

// Stats reads the slots' state under one hold of their lock, so the
// figures agree with each other.
func (s *AgentSlots) Stats() AgentSlotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return AgentSlotStats{InFlight: s.node, Waiting: len(s.line), Caps: s.caps}
}
