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
}

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
	known, err := s.known(ctx)
	if err != nil {
		return rep, fmt.Errorf("containerd's containers: %w", err)
	}
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
			rep.Removed = append(rep.Removed, s.sweepDir(dir, known)...)
		}
		if !exists && os.Remove(file) == nil {
			rep.Dropped++
		}
	}
	return rep, nil
}

func (s *Sweeper) sweepDir(dir string, known map[string]bool) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		m := leafName.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil || known[m[1]] {
			continue
		}
		leaf := filepath.Join(dir, e.Name())
		if !s.stray(leaf) {
			continue
		}
		if err := s.rmdir(leaf); err != nil {
			s.log.Debug("stray container cgroup not removable", "cgroup", leaf, "err", err)
			continue
		}
		s.log.Info("removed a stray container cgroup containerd no longer knows", "cgroup", leaf)
		removed = append(removed, leaf)
	}
	return removed
}

// stray: old enough, no process in it, no child cgroup.
func (s *Sweeper) stray(leaf string) bool {
	fi, err := os.Stat(leaf)
	if err != nil || s.now().Sub(fi.ModTime()) < minAge {
		return false
	}
	entries, err := os.ReadDir(leaf)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() {
			return false
		}
	}
	procs, err := os.ReadFile(filepath.Join(leaf, "cgroup.procs"))
	return err == nil && strings.TrimSpace(string(procs)) == ""
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
// each removal to onRemove (metrics).
func (s *Sweeper) Run(ctx context.Context, interval time.Duration, onRemove func(n int)) {
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
		if n := len(rep.Removed); n > 0 && onRemove != nil {
			onRemove(n)
		}
	}
}
