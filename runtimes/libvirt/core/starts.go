package core

import (
	"slices"
	"sync"
)

// Starts are the qemu starts crimux has asked libvirt for and that are
// still in flight. The placement server grants a new qemu process its
// VM's cgroup (and the VM's files: its tap) only for one of them, once:
// a compromised qemu running the wrapper with a neighbour's name finds no
// grant, its neighbour running or not.
type Starts struct {
	mu     sync.Mutex
	grants map[string][]*startGrant
}

type startGrant struct{ used bool }

// Arm opens a grant for one new qemu of domain while the libvirt call
// that starts it runs; done closes it, used or not.
func (s *Starts) Arm(domain string) (done func()) {
	g := &startGrant{}
	s.mu.Lock()
	if s.grants == nil {
		s.grants = map[string][]*startGrant{}
	}
	s.grants[domain] = append(s.grants[domain], g)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.grants[domain] = slices.DeleteFunc(s.grants[domain], func(x *startGrant) bool { return x == g })
		if len(s.grants[domain]) == 0 {
			delete(s.grants, domain)
		}
	}
}

// Take uses an open grant of domain; false if there is none.
func (s *Starts) Take(domain string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.grants[domain] {
		if !g.used {
			g.used = true
			return true
		}
	}
	return false
}

// StartingQemu runs start, a libvirt call that starts a new qemu process
// of domain (a start, a restore, a snapshot revert), with a grant open for
// that qemu's placement.
func (r *Runtime) StartingQemu(domain string, start func() error) error {
	defer r.Starts.Arm(domain)()
	return start()
}
