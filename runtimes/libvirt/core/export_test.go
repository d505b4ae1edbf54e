package core

import "github.com/crimux/crimux/runtimes/libvirt/virt"

// Exported for the external tests (package core_test), which build the
// runtime with coretest (an internal test cannot: coretest imports core).

// DomainStopped is domainStopped: the exit of a domain that stopped.
func (r *Runtime) DomainStopped(domain string, code int32, reason string) {
	r.domainStopped(domain, code, reason)
}

// LockWaiters is how many holders and waiters the lock of key has.
func (r *Runtime) LockWaiters(key string) int {
	return r.Locks.Holders(key)
}

// OnLifecycle is onLifecycle: a libvirt lifecycle event.
func (r *Runtime) OnLifecycle(ev virt.LifecycleEvent) { r.onLifecycle(ev) }
