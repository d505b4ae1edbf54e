package virt

// AgentSlots are the guest-agent call slots every connection of c counts
// against, for metrics: read them, never take one.
func (c *Conn) AgentSlots() *AgentSlots { return c.agents }
