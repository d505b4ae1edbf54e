package cgroup

// The functions below discover the layout on every call (one read of
// /proc/self/mountinfo); a long-lived caller keeps a Layout from Discover
// and calls its methods instead.

// Create makes the VM's leaf with its limits in every hierarchy of this host.
func Create(s Spec) error {
	l, err := Discover()
	if err != nil {
		return err
	}
	return l.Create(s)
}

// Update applies changed limits to an existing leaf.
func Update(s Spec) error {
	l, err := Discover()
	if err != nil {
		return err
	}
	return l.Update(s)
}

// Remove deletes the leaf in every hierarchy; a missing leaf is no error.
func Remove(s Spec) error {
	l, err := Discover()
	if err != nil {
		return err
	}
	return l.Remove(s)
}

// Exists tells whether the leaf exists in every hierarchy.
func Exists(s Spec) (bool, error) {
	l, err := Discover()
	if err != nil {
		return false, err
	}
	return l.Exists(s)
}

// Stats returns the leaf's usage.
func Stats(s Spec) (Usage, error) {
	l, err := Discover()
	if err != nil {
		return Usage{}, err
	}
	return l.Stats(s)
}
