// Package cgroupgc removes the container cgroups runc leaves behind under
// a container pod's cgroup parent.
//
// A runc create that is killed half way (its caller's context cancelled:
// kubelet, or crimux, gone in the middle of a CRI call) leaves the
// container's cgroup directory in the hierarchies it had reached — on
// cgroup v1 typically cpuset alone, which runc makes first — and no runc
// state to find it by, so no later `runc delete` removes it. The empty
// directory then blocks the removal of the pod's cgroup itself.
//
// crimux records the cgroup parent of every container pod before it asks
// containerd for the pod (intent, a file per parent under the state dir),
// and a sweep looks under each recorded parent, in every hierarchy, for
// container leaves (named by a container ID, or cri-containerd-<ID>.scope)
// that are empty (no process, no child), older than ten seconds (never
// one being set up), and whose ID containerd does not know. Those are removed
// (rmdir, which the kernel refuses for a cgroup in use) and counted. A
// record is dropped once its parent is gone from every hierarchy (kubelet
// removed the pod's cgroup).
//
// A leaf that still holds processes under an ID containerd's CRI does not
// know is an orphaned task: containerd 2.4 leaves the pause task of a
// RunPodSandbox cancelled half way running (its cleanup fails with
// "cannot delete running task", and the later StopPodSandbox and
// RemovePodSandbox of the SANDBOX_UNKNOWN pod do not stop it). With a
// Reaper, a sweep ends such a task through containerd's task API, but
// only when no call that creates or starts a task ran through crimux while
// it looked (Reaper.Calls), so a pod or container being set up right now,
// which containerd's CRI lists only once it is done, is never taken for
// one.
package cgroupgc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// leafName matches a container's cgroup: cgroupfs driver (the ID) or
// systemd driver (cri-containerd-<ID>.scope).
var leafName = regexp.MustCompile(`^(?:cri-containerd-)?([0-9a-f]{64})(?:\.scope)?$`)

// minAge keeps a sweep away from a cgroup runc is setting up right now
// (milliseconds between its mkdir and the process moving in).
const minAge = 10 * time.Second

// Sweeper records pod cgroup parents and sweeps stray leaves under them.
type Sweeper struct {
	dir string
	// roots are the mount points of the cgroup hierarchies.
	roots func() ([]string, error)
	// parentPath turns a CRI cgroup_parent into a path below a root.
	parentPath func(string) (string, error)
	// known returns the IDs containerd knows (containers and sandboxes).
	known func(ctx context.Context) (map[string]bool, error)
	log   *slog.Logger
	now   func() time.Time
	// rmdir removes a cgroup (on cgroupfs a plain rmdir, which the kernel
	// refuses for a cgroup with processes or children).
	rmdir func(string) error
	// reaper ends orphaned tasks; nil: leaves with processes are kept.
	reaper Reaper
}

// Reaper ends orphaned tasks (see the package comment).
type Reaper interface {
	// Calls counts the calls that create or start a task begun so far,
	// and tells whether one is in flight now.
	Calls() (begun uint64, inFlight bool)
	// Reap kills and deletes the task of container or sandbox id and its
	// container record; one that is already gone is no error.
	Reap(ctx context.Context, id string) error
}

// SetReaper makes sweeps end orphaned tasks with r.
func (s *Sweeper) SetReaper(r Reaper) { s.reaper = r }

// New returns a Sweeper keeping its records in dir.
func New(dir string, roots func() ([]string, error), parentPath func(string) (string, error),
	known func(context.Context) (map[string]bool, error), log *slog.Logger) (*Sweeper, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cgroup GC records: %w", err)
	}
	return &Sweeper{dir: dir, roots: roots, parentPath: parentPath, known: known, log: log, now: time.Now, rmdir: os.Remove}, nil
}

// Record notes a pod's cgroup parent ("" is none). Idempotent.
func (s *Sweeper) Record(parent string) error {
	if parent == "" {
		return nil
	}
	if _, err := s.parentPath(parent); err != nil {
		return nil // not a parent crimux could sweep; containerd judges it
	}
	sum := sha256.Sum256([]byte(parent))
	p := filepath.Join(s.dir, hex.EncodeToString(sum[:12]))
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(parent), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Report is what one sweep did.
type Report struct {
	Removed []string // cgroup directories removed
	Dropped int      // records whose parent is gone
	Reaped  []string // IDs of orphaned tasks ended
}

// Sweep removes the stray leaves under every recorded parent.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	var rep Report
	records, err := s.records()
	if err != nil || len(records) == 0 {
		return rep, err
	}
	roots, err := s.roots()
	if err != nil {
		return rep, err
	}
	quiet := s.quietSince()
	known, err := s.known(ctx)
	if err != nil {
		return rep, fmt.Errorf("containerd's containers: %w", err)
	}
	orphans := s.sweepRecords(records, roots, known, &rep)
	if rep.Reaped = s.reap(ctx, orphans, quiet); len(rep.Reaped) > 0 {
		// The ended tasks' leaves, if runc left them, are strays now.
		s.sweepRecords(records, roots, known, &rep)
	}
	return rep, nil
}

// sweepRecords sweeps under every recorded parent into rep, drops the
// records of parents gone from every hierarchy, and returns the unknown
// IDs whose leaves hold processes.
func (s *Sweeper) sweepRecords(records map[string]string, roots []string, known map[string]bool, rep *Report) map[string]bool {
	orphans := map[string]bool{}
	for file, parent := range records {
		rel, err := s.parentPath(parent)
		if err != nil {
			continue
		}
		exists := false
		for _, root := range roots {
			dir := filepath.Join(root, rel)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			exists = true
			removed, busy := s.sweepDir(dir, known)
			rep.Removed = append(rep.Removed, removed...)
			for _, id := range busy {
				orphans[id] = true
			}
		}
		if !exists && os.Remove(file) == nil {
			rep.Dropped++
		}
	}
	return orphans
}

// quietSince returns a check that no call creating or starting a task
// began, or was in flight, since quietSince was called (never true
// without a reaper).
func (s *Sweeper) quietSince() func() bool {
	if s.reaper == nil {
		return func() bool { return false }
	}
	begun, inFlight := s.reaper.Calls()
	return func() bool {
		now, still := s.reaper.Calls()
		return !inFlight && !still && now == begun
	}
}

// reap ends the orphaned tasks ids, provided quiet still holds: the IDs
// containerd listed were complete for every task that existed then.
func (s *Sweeper) reap(ctx context.Context, ids map[string]bool, quiet func() bool) []string {
	if len(ids) == 0 || s.reaper == nil {
		return nil
	}
	if !quiet() {
		s.log.Debug("orphaned tasks left for a quieter sweep", "count", len(ids))
		return nil
	}
	var reaped []string
	for id := range ids {
		if err := s.reaper.Reap(ctx, id); err != nil {
			s.log.Warn("orphaned task not ended", "id", id, "err", err)
			continue
		}
		s.log.Info("ended an orphaned task containerd's CRI no longer knows", "id", id)
		reaped = append(reaped, id)
	}
	return reaped
}

// sweepDir removes the stray leaves in dir and returns them, and the IDs
// of unknown leaves that still hold processes.
func (s *Sweeper) sweepDir(dir string, known map[string]bool) (removed, orphans []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		m := leafName.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil || known[m[1]] {
			continue
		}
		leaf := filepath.Join(dir, e.Name())
		switch s.state(leaf) {
		case leafBusy:
			orphans = append(orphans, m[1])
			continue
		case leafKeep:
			continue
		}
		if err := s.rmdir(leaf); err != nil {
			s.log.Debug("stray container cgroup not removable", "cgroup", leaf, "err", err)
			continue
		}
		s.log.Info("removed a stray container cgroup containerd no longer knows", "cgroup", leaf)
		removed = append(removed, leaf)
	}
	return removed, orphans
}

// What a sweep makes of a leaf whose ID containerd does not know.
type leafState int

const (
	leafKeep  leafState = iota // too young, unreadable, or with child cgroups
	leafStray                  // old enough, no process, no child: remove
	leafBusy                   // old enough, with processes: an orphaned task
)

func (s *Sweeper) state(leaf string) leafState {
	fi, err := os.Stat(leaf)
	if err != nil || s.now().Sub(fi.ModTime()) < minAge {
		return leafKeep
	}
	entries, err := os.ReadDir(leaf)
	if err != nil {
		return leafKeep
	}
	for _, e := range entries {
		if e.IsDir() {
			return leafKeep
		}
	}
	procs, err := os.ReadFile(filepath.Join(leaf, "cgroup.procs"))
	switch {
	case err != nil:
		return leafKeep
	case strings.TrimSpace(string(procs)) == "":
		return leafStray
	default:
		return leafBusy
	}
}

// records maps record files to the parents they hold.
func (s *Sweeper) records() (map[string]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		if b, err := os.ReadFile(p); err == nil {
			out[p] = string(b)
		}
	}
	return out, nil
}

// Run sweeps at once and then every interval until ctx ends, reporting
// each sweep that did something to onSweep (metrics).
func (s *Sweeper) Run(ctx context.Context, interval time.Duration, onSweep func(Report)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		rep, err := s.Sweep(ctx)
		if err != nil {
			s.log.Debug("cgroup sweep skipped", "err", err)
			continue
		}
		if len(rep.Removed)+len(rep.Reaped) > 0 && onSweep != nil {
			onSweep(rep)
		}
	}
}
