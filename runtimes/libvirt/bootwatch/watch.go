// Package bootwatch tells a VM whose guest never got past its firmware or
// boot loader from one that booted: libvirt says both are running (a
// nested guest under KVM that hangs after GRUB for minutes is "running"
// to libvirt), so the CRI status asks this watch too.
//
// A watch starts when crimux cold-boots a VM (StartContainer, a power-on
// from Shutdown) and polls the VM's signs of an operating system: a
// packet the guest sent on its pod network (firmware sends none: crimux's
// domains boot from disk or a kernel, never from the network) or its
// guest agent's channel connected. The first sign ends the watch. With no
// sign Timeout after the start, the watch reports the VM stuck (once)
// and keeps looking: a slow guest that shows up later is reported
// booted, late. What the reports do is Reports': the VM runtime's are
// Guests (guests.go), which read a VM's signs through their Host and
// tell its user (CRI status, log line, pod event, counters).
package bootwatch

import (
	"sync"
	"time"
)

// Sign reports whether the guest has shown itself, and how ("a packet on
// its pod network"). An error is a sign not readable now (logged by the
// caller's Sign; the watch looks again).
type Sign func() (how string, seen bool)

// Reports receive what a watch found.
type Reports interface {
	// Stuck: no sign of the guest's operating system after (the
	// watch's Timeout, or more after a crimux restart).
	Stuck(id string, after time.Duration)
	// Booted: the guest showed itself (how) after; late is true when it
	// was reported stuck before.
	Booted(id, how string, after time.Duration, late bool)
}

// Watcher runs one watch per VM.
type Watcher struct {
	// Timeout is how long a guest may show nothing before it is
	// reported stuck; 0 watches nothing.
	Timeout time.Duration
	// Every is the polling interval.
	Every   time.Duration
	Reports Reports

	mu      sync.Mutex
	watches map[string]*watch
}

// DefaultEvery is how often a VM that has not booted yet is looked at.
const DefaultEvery = 2 * time.Second

type watch struct {
	since time.Time
	sign  Sign
	stop  chan struct{}
	stuck bool
}

// SetTimeout changes Timeout (a config reload): the watches running take
// it at their next look; 0 watches no VM started from now on.
func (w *Watcher) SetTimeout(d time.Duration) {
	w.mu.Lock()
	w.Timeout = d
	w.mu.Unlock()
}

// CurrentTimeout is Timeout as SetTimeout last set it.
func (w *Watcher) CurrentTimeout() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Timeout
}

// Watch starts watching VM id, started at since, replacing a watch of it
// running already (a new boot).
func (w *Watcher) Watch(id string, since time.Time, sign Sign) {
	if w.CurrentTimeout() <= 0 {
		return
	}
	wt := &watch{since: since, sign: sign, stop: make(chan struct{})}
	w.mu.Lock()
	if w.watches == nil {
		w.watches = map[string]*watch{}
	}
	if old := w.watches[id]; old != nil {
		close(old.stop)
	}
	w.watches[id] = wt
	w.mu.Unlock()
	go w.run(id, wt)
}

// Forget ends VM id's watch (it stopped, or is gone).
func (w *Watcher) Forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.watches[id]; wt != nil {
		close(wt.stop)
		delete(w.watches, id)
	}
}

// ForgetAll ends every watch (crimux stops).
func (w *Watcher) ForgetAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, wt := range w.watches {
		close(wt.stop)
		delete(w.watches, id)
	}
}

// Stuck reports whether VM id is reported stuck now, and since when it
// was started.
func (w *Watcher) Stuck(id string) (since time.Time, stuck bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.watches[id]; wt != nil && wt.stuck {
		return wt.since, true
	}
	return time.Time{}, false
}

func (w *Watcher) run(id string, wt *watch) {
	every := w.Every
	if every <= 0 {
		every = DefaultEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if w.look(id, wt) {
			return
		}
		select {
		case <-wt.stop:
			return
		case <-tick.C:
		}
	}
}

// look takes one look at the guest; true ends the watch.
func (w *Watcher) look(id string, wt *watch) bool {
	how, seen := wt.sign()
	after := time.Since(wt.since).Round(time.Second)
	w.mu.Lock()
	if w.watches[id] != wt { // forgotten or replaced meanwhile
		w.mu.Unlock()
		return true
	}
	late, report := wt.stuck, false
	switch {
	case seen:
		delete(w.watches, id)
	case !wt.stuck && w.Timeout > 0 && time.Since(wt.since) >= w.Timeout:
		wt.stuck, report = true, true
	}
	w.mu.Unlock()
	switch {
	case seen:
		w.Reports.Booted(id, how, after, late)
		return true
	case report:
		w.Reports.Stuck(id, after)
	}
	return false
}
