package virtfake

import "github.com/crimux/crimux/runtimes/libvirt/virt"

// power runs a power operation on a domain: the injected failure first,
// then the domain, then op, all under mu.
func (f *Libvirt) power(method string, h virt.Domain, op func(*Domain) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(method); err != nil {
		return err
	}
	d, err := f.find(h)
	if err != nil {
		return err
	}
	return op(d)
}

// Start boots a shut off domain, or restores its managed save.
func (f *Libvirt) Start(h virt.Domain) error {
	return f.power("Start", h, func(d *Domain) error { return f.start(h.Name, d, virt.StateRunning) })
}

// StartIfOff is Lookup, State and Start, each counted and failing as
// those do.
func (f *Libvirt) StartIfOff(name string) (bool, error) {
	d, err := f.Lookup(name)
	if err != nil {
		return false, err
	}
	if s, err := f.State(d); err == nil && s != virt.StateShutoff {
		return false, nil
	}
	return true, f.Start(d)
}

func (f *Libvirt) StartPaused(h virt.Domain) error {
	return f.power("StartPaused", h, func(d *Domain) error { return f.start(h.Name, d, virt.StatePaused) })
}

func (f *Libvirt) start(name string, d *Domain, to virt.State) error {
	if d.State.Active() {
		return invalid("domain is already running")
	}
	d.State, d.ManagedSave = to, false
	return nil
}

// Shutdown powers the guest off at once (with its event) unless it
// ignores ACPI.
func (f *Libvirt) Shutdown(h virt.Domain) error {
	return f.power("Shutdown", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		if d.IgnoresACPI || d.State == virt.StatePaused {
			return nil
		}
		d.State = virt.StateShutoff
		f.emitStop(h.Name, virt.StopShutdown)
		return nil
	})
}

func (f *Libvirt) Destroy(h virt.Domain) error {
	return f.power("Destroy", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		d.State = virt.StateShutoff
		f.emitStop(h.Name, virt.StopDestroyed)
		return nil
	})
}

func (f *Libvirt) Suspend(h virt.Domain) error {
	return f.power("Suspend", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		d.State = virt.StatePaused
		return nil
	})
}

func (f *Libvirt) Resume(h virt.Domain) error {
	return f.power("Resume", h, func(d *Domain) error {
		if d.State != virt.StatePaused {
			return invalid("domain is not paused")
		}
		d.State = virt.StateRunning
		return nil
	})
}

// Reboot has the guest reboot at once (its event) unless it ignores ACPI.
func (f *Libvirt) Reboot(h virt.Domain) error {
	return f.power("Reboot", h, func(d *Domain) error {
		if d.State != virt.StateRunning {
			return invalid("domain is not running")
		}
		if !d.IgnoresACPI {
			f.emitReboot(h.Name)
		}
		return nil
	})
}

func (f *Libvirt) Reset(h virt.Domain) error {
	return f.power("Reset", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		return nil
	})
}

func (f *Libvirt) ManagedSave(h virt.Domain) error {
	return f.power("ManagedSave", h, func(d *Domain) error {
		if !d.State.Active() {
			return invalid("domain is not running")
		}
		d.State, d.ManagedSave = virt.StateShutoff, true
		f.emitStop(h.Name, virt.StopSaved)
		return nil
	})
}
