package vmtypes

// PowerState is the power state a user chose for a VM. The VM's CRI
// container stays CONTAINER_RUNNING, with the same ID, in every one:
//
//	Running <--suspend / resume--> Paused
//	Running|Paused --ACPI power button, deadline, destroy--> Shutdown
//	Running|Paused --managed save (memory to disk)--> Hibernate
//	Shutdown --create: boots the same overlay disk--> Running|Paused
//	Hibernate --create: restores the saved memory--> Running|Paused
type PowerState string

// The power states.
const (
	PowerRunning   PowerState = "Running"
	PowerPaused    PowerState = "Paused"
	PowerShutdown  PowerState = "Shutdown"
	PowerHibernate PowerState = "Hibernate"
)

// Valid reports whether p is one of the power states.
func (p PowerState) Valid() bool {
	switch p {
	case PowerRunning, PowerPaused, PowerShutdown, PowerHibernate:
		return true
	}
	return false
}

// GuestOff reports whether no qemu runs in this power state, by the
// user's choice.
func (p PowerState) GuestOff() bool { return p == PowerShutdown || p == PowerHibernate }

// PowerChange is the outcome of SetPowerState.
type PowerChange struct {
	Previous, State PowerState
	// Forced: a Shutdown had to force the guest off after the deadline.
	Forced bool
}
