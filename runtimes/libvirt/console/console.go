// Package console copies a VM's serial console into its CRI log: the
// serial console reaches kubelet's log like a container's stdout. A copier
// follows console.log (written by virtlogd, so nothing is lost while
// crimux is down) and appends each line to the CRI log file in the CRI
// text format, "<RFC3339Nano> stdout F <line>", or "P" for a partial line
// that waited too long for its end. The offset copied so far is kept
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
	consolePoll    = 50 * time.Millisecond
	partialAfter   = 500 * time.Millisecond
	maxLineBytes   = 16 << 10
	offsetFileName = "console.offset"
)

// Consoles are the running copiers, one per VM, by container ID.
type Consoles struct {
	mu      sync.Mutex
	copiers map[string]*copier
	log     *slog.Logger
}

// New returns no copiers yet.
func New(log *slog.Logger) *Consoles {
	return &Consoles{copiers: map[string]*copier{}, log: log}
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
		done: make(chan struct{}), stopped: make(chan struct{}), reopen: make(chan chan error), log: cs.log.With("container", id)}
	cs.copiers[id] = cp
	go cp.run()
}

// Stop ends id's copier after it has copied what is there.
func (cs *Consoles) Stop(id string) {
	cs.mu.Lock()
	cp, ok := cs.copiers[id]
	delete(cs.copiers, id)
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
