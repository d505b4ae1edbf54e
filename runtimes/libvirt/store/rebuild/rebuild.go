// Package rebuild makes the VM runtime's store again when it is damaged
// or lost (`crimuxctl store rebuild`), while crimux is stopped.
// The damaged store is moved aside, never deleted; the new one holds the
// records that libvirt's domains and the state dir's directories prove
// together: a domain named for its container, stamped with this crimux's
// identity and the pod's IDs and names, whose files are in its VM's
// directory, and whose VM's and pod's record copies (store/copies.go)
// name the same IDs, pod, directory, identity and root disk. Everything
// else is reported with why and left as it is: nothing is adopted that
// is not proven, nothing is deleted. A store crimux can open, or one of
// a newer format, is refused and left as it is.
package rebuild

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/crimux/crimux/internal/identity"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Domains is what a rebuild reads of libvirt.
type Domains interface {
	ListAll() ([]virt.Domain, error)
	XML(virt.Domain) (string, error)
}

// Options say what to rebuild.
type Options struct {
	// StateDir is crimux's state dir (its store is StateDir/vm.db).
	StateDir string
	// Instance is crimux's identity; "" reads the state dir's.
	Instance string
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// Now names the moved-aside store; nil is time.Now.
	Now func() time.Time
}

// Report is what a rebuild found and did.
type Report struct {
	Store string `json:"store"`
	// Damage is what is wrong with the store ("" when there was none).
	Damage string `json:"damage,omitempty"`
	// MovedTo is where the damaged store went ("" when none was moved).
	MovedTo    string      `json:"moved_to,omitempty"`
	DryRun     bool        `json:"dry_run,omitempty"`
	Sandboxes  []Rebuilt   `json:"sandboxes"`
	Containers []Rebuilt   `json:"containers"`
	LeftAlone  []LeftAlone `json:"left_alone"`
}

// Rebuilt is a record of the new store.
type Rebuilt struct {
	ID string `json:"id"`
	// Pod is the pod's namespace/name.
	Pod string `json:"pod"`
	// State is the record's CRI state.
	State string `json:"state"`
}

// LeftAlone is something a rebuild did not prove and did not touch.
type LeftAlone struct {
	// Kind is domain, vm-dir or pod-dir; Name the domain's name or the
	// directory's path.
	Kind string `json:"kind"`
	Name string `json:"name"`
	Why  string `json:"why"`
	// Then is what crimux does with it once it runs: what it does with
	// anything it has no record of.
	Then string `json:"then"`
}

// Run rebuilds the store of opts.StateDir from what l and the state dir
// prove. It refuses (changing nothing) a store crimux can open, one of a
// newer format, and one a process holds.
func Run(opts Options, l Domains) (*Report, error) {
	path := filepath.Join(opts.StateDir, store.FileName)
	rep := &Report{Store: path, DryRun: opts.DryRun, Sandboxes: []Rebuilt{}, Containers: []Rebuilt{}, LeftAlone: []LeftAlone{}}
	if err := isStateDir(opts.StateDir); err != nil {
		return nil, err
	}
	damage, err := needsRebuild(opts.StateDir)
	if err != nil {
		return nil, err
	}
	rep.Damage = damage
	instance := opts.Instance
	if instance == "" {
		if instance, err = identity.Read(opts.StateDir); err != nil {
			return nil, fmt.Errorf("this state dir's crimux identity: %w", err)
		}
	}
	ev, err := gather(opts.StateDir, l)
	if err != nil {
		return nil, err
	}
	p := prove(ev, opts.StateDir, instance)
	p.report(rep)
	if opts.DryRun {
		return rep, nil
	}
	if rep.MovedTo, err = moveAside(path, damage != "", opts.now()); err != nil {
		return rep, err
	}
	return rep, p.write(opts.StateDir, rep.MovedTo)
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// needsRebuild says what is wrong with the store: "" when there is none,
// the damage when it is damaged; an error when it must be left alone.
func needsRebuild(dir string) (damage string, err error) {
	err = store.Check(dir)
	var damaged *store.DamagedError
	switch {
	case err == nil:
		return "", fmt.Errorf("VM store %s is intact: crimux starts on it, and a rebuild never replaces a store crimux can read", filepath.Join(dir, store.FileName))
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case errors.As(err, &damaged):
		return damaged.What, nil
	case errors.Is(err, store.ErrInUse):
		return "", fmt.Errorf("%w: stop crimux first", err)
	}
	return "", err // a newer format among them: left as it is
}

// isStateDir refuses a directory that holds nothing of crimux's: a
// mistyped --state-dir gets no store of its own.
func isStateDir(dir string) error {
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("state dir: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("state dir %s is not a directory", dir)
	}
	for _, name := range []string{store.FileName, vmsDir, podsDir} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("state dir %s holds no crimux state (no %s, %s/ or %s/): is it crimux's state_dir?", dir, store.FileName, vmsDir, podsDir)
}
