// Package opguard owns what guards an operation on a pod or a VM: the
// lock of its key, held for the operation without a global lock, and the
// rollback of the steps done when it fails halfway.
package opguard

import "sync"

// Locks serialise operations on one pod without a global lock.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	sync.Mutex
	refs int
}

// Lock takes the lock of key and returns its unlock.
func (k *Locks) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// Holders is how many hold or wait for the lock of key (tests watch a
// waiter queue up).
func (k *Locks) Holders(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.locks[key]; l != nil {
		return l.refs
	}
	return 0
}
