package nospace

// Resume is resume: one look at a VM paused on a full disk.
func (n *VMs) Resume(domain string) { n.resume(domain) }
