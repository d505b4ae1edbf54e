// Package rebootwatch owns the wait for a VM's reboot: libvirt's reboot
// events handed to the soft reboots waiting for them.
package rebootwatch

import (
	"fmt"
	"sync"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Watch hands libvirt's reboot events to the soft reboots waiting
// for them. Each connection subscribes once (onConnect) and keeps the
// subscription as long as it lives: a subscription per reboot would
// deregister on a live connection, which libvirtd 9.0 can crash on when
// the connection closes meanwhile (see virt.Conn).
type Watch struct {
	mu sync.Mutex
	// on is the connection whose reboot events are being followed.
	on      virt.Libvirt
	waiters map[string]map[chan struct{}]struct{}
}

// New follows no connection yet.
func New() *Watch {
	return &Watch{waiters: map[string]map[chan struct{}]struct{}{}}
}

// Follow records that l's reboot events are subscribed to; the returned
// func undoes it when the subscription ends.
func (w *Watch) Follow(l virt.Libvirt) func() {
	w.mu.Lock()
	w.on = l
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.on == l {
			w.on = nil
		}
		w.mu.Unlock()
	}
}

// Wait returns a channel closed at domain's next reboot on l; cancel
// releases it. Unavailable when l's reboot events are not followed (yet):
// a reboot event could then go unseen.
func (w *Watch) Wait(l virt.Libvirt, domain string) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on != l {
		return nil, nil, fmt.Errorf("libvirt's reboot events are not followed yet on this connection (just reconnected?); retry: %w", errdefs.ErrUnavailable)
	}
	ch := make(chan struct{})
	if w.waiters[domain] == nil {
		w.waiters[domain] = map[chan struct{}]struct{}{}
	}
	w.waiters[domain][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.waiters[domain]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(w.waiters, domain)
			}
		}
	}, nil
}

// Fire wakes everyone waiting for domain's reboot.
func (w *Watch) Fire(domain string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[domain] {
		close(ch)
	}
	delete(w.waiters, domain)
}
