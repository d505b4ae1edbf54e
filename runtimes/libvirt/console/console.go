// Package console copies a VM's serial console into its CRI log: the
// serial console reaches kubelet's log like a container's stdout. A copier
// follows console.log (written by virtlogd, so nothing is lost while
// crimux is down), woken by inotify when virtlogd writes it, and appends
// each line to the CRI log file in the CRI text format,
// "<RFC3339Nano> stdout F <line>", or "P" for a partial line that waited
// too long for its end. The offset copied so far is kept
// beside console.log, so a restarted crimux neither repeats nor skips
// output.
package console

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"
)

const (
	// consolePoll is how often a copier reads console.log when inotify
	// cannot watch it (no instance, or the watch limit reached).
	consolePoll = 50 * time.Millisecond
	// consoleRecheck is how often a watched copier reads console.log
	// unwoken, and tries again a CRI log it could not open.
	consoleRecheck = 2 * time.Second
	// copyGap is the least time between two passes of one copier: a
	// chatty console wakes it on each of virtlogd's writes.
	copyGap        = 10 * time.Millisecond
	partialAfter   = 500 * time.Millisecond
	maxLineBytes   = 16 << 10
	offsetFileName = "console.offset"
)

// Consoles are the running copiers, one per VM, by container ID.
type Consoles struct {
	mu      sync.Mutex
	copiers map[string]*copier
	log     *slog.Logger
	// notify wakes the copiers (made with the first, closed with the
	// last); nil while there is none, or when inotify failed.
	notify *notifier
	// recheck is consoleRecheck (tests shorten or lengthen it).
	recheck time.Duration
	// warned: inotify's failure was logged once.
	warned bool
}

// New returns no copiers yet.
func New(log *slog.Logger) *Consoles {
	return &Consoles{copiers: map[string]*copier{}, log: log, recheck: consoleRecheck}
}

// Start follows the console of VM id, whose files are in dir, into its
// CRI log at logPath (no-op without a log path or when already
// following).
func (cs *Consoles) Start(id, dir, logPath string) {
	if logPath == "" {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.copiers[id]; ok {
		return
	}
	cp := &copier{src: filepath.Join(dir, "console.log"), dst: logPath, offsetFile: filepath.Join(dir, offsetFileName),
		done: make(chan struct{}), stopped: make(chan struct{}), reopen: make(chan chan error), notes: make(chan note), log: cs.log.With("container", id),
		wake: make(chan struct{}, 1), recheck: consolePoll}
	cs.watch(cp, dir)
	cs.copiers[id] = cp
	go cp.run()
}

// watch has cp woken by inotify when console.log in dir changes, and
// reading it unwoken only every recheck; without inotify it polls.
func (cs *Consoles) watch(cp *copier, dir string) {
	var err error
	if cs.notify == nil {
		cs.notify, err = newNotifier()
	}
	if err == nil {
		if cp.wd, err = cs.notify.watch(dir, cp.wake); err == nil {
			cp.notify, cp.recheck = cs.notify, cs.recheck
			return
		}
	}
	if !cs.warned {
		cs.warned = true
		cs.log.Warn("cannot watch VM consoles with inotify; polling them instead", "every", consolePoll, "err", err)
	}
}

// unwatch ends cp's watch, and the notifier with the last copier.
func (cs *Consoles) unwatch(cp *copier) {
	if cp.notify == nil {
		return
	}
	cp.notify.unwatch(cp.wd, cp.wake)
	if cs.notify == cp.notify && cs.notify.idle() {
		cs.notify.close()
		cs.notify = nil
	}
}

// Stop ends id's copier after it has copied what is there.
func (cs *Consoles) Stop(id string) {
	cs.mu.Lock()
	cp, ok := cs.copiers[id]
	delete(cs.copiers, id)
	if ok {
		cs.unwatch(cp)
	}
	cs.mu.Unlock()
	if ok {
		close(cp.done)
		<-cp.stopped
	}
}

// Reopen makes id's copier reopen its CRI log (after kubelet rotated it).
func (cs *Consoles) Reopen(id string) error {
	cs.mu.Lock()
	cp, ok := cs.copiers[id]
	cs.mu.Unlock()
	if !ok {
		return nil
	}
	errc := make(chan error, 1)
	select {
	case cp.reopen <- errc:
		return <-errc
	case <-cp.stopped:
		return nil
	}
}

// StopAll ends every copier.
func (cs *Consoles) StopAll() {
	cs.mu.Lock()
	ids := make([]string, 0, len(cs.copiers))
	for id := range cs.copiers {
		ids = append(ids, id)
	}
	cs.mu.Unlock()
	for _, id := range ids {
		cs.Stop(id)
	}
}
