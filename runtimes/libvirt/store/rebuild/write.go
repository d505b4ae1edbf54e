package rebuild

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// moveAside moves the damaged store at path to path.damaged-<time> and
// returns where; "" when there is none (damaged is false: no store). A
// hard link, then the old name removed: no file is ever replaced, and the
// damaged store is kept whole.
func moveAside(path string, damaged bool, now time.Time) (string, error) {
	if !damaged {
		return "", nil
	}
	to := path + ".damaged-" + now.UTC().Format("20060102T150405.000Z")
	if err := os.Link(path, to); err != nil {
		return "", fmt.Errorf("move the damaged store aside: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return to, fmt.Errorf("move the damaged store aside: it is at %s too, but %s is still there: %w", to, path, err)
	}
	return to, nil
}

// write makes the new store of the proven records. One it could not
// finish is moved aside too: crimux must not start on half of them.
func (p *proof) write(stateDir, movedTo string) error {
	st, err := store.Open(stateDir)
	if err != nil {
		return fmt.Errorf("make the new store: %w", err)
	}
	err = p.put(st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return nil
	}
	path := filepath.Join(stateDir, store.FileName)
	partial := path + ".unfinished"
	if rerr := os.Rename(path, partial); rerr != nil {
		return fmt.Errorf("write the new store: %w; it could not be moved aside either (%v): remove %s before crimux starts", err, rerr, path)
	}
	return fmt.Errorf("write the new store: %w (the unfinished one is at %s, the damaged one at %s)", err, partial, movedTo)
}

func (p *proof) put(st *store.Store) error {
	ids := make([]string, 0, len(p.sandboxes))
	for id := range p.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := st.PutSandbox(p.sandboxes[id]); err != nil {
			return fmt.Errorf("pod sandbox %s: %w", id, err)
		}
	}
	for _, c := range p.containers {
		if err := st.PutContainer(c.rec); err != nil {
			return fmt.Errorf("container %s: %w", c.rec.ID, err)
		}
	}
	return nil
}
