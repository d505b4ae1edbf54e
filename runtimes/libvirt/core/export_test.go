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
	r.Locks.mu.Lock()
	defer r.Locks.mu.Unlock()
	if l := r.Locks.locks[key]; l != nil {
		return l.refs
	}
	return 0
}

// OnLifecycle is onLifecycle: a libvirt lifecycle event.
func (r *Runtime) OnLifecycle(ev virt.LifecycleEvent) { r.onLifecycle(ev) }

// ResumeNoSpace is resumeNoSpace: one look at a VM paused on a full disk.
func (r *Runtime) ResumeNoSpace(domain string) { r.resumeNoSpace(domain) }
