package instant

import (
	"fmt"
	"sort"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// The templates kept on the state disk are bounded in number (MaxKept):
// a tenant that asks for templates of ever new shapes makes the node
// remove old ones, never fill its disk. A template is removed only when
// another is to be made, and only one no clone needs: a template's files
// are read when a clone is created (its disk, its domain) and when it is
// first started (its saved state); once restored, a clone needs nothing
// of its template.

// create makes meta's template's directory once the kept templates
// leave room for it: the failed ones first, then the least recently used
// ready ones that no clone needs. With no room (every other template
// being made or needed) it makes none: the pod boots.
func (m *Maker) create(meta template.Meta) error {
	m.room.Lock()
	defer m.room.Unlock()
	if err := m.makeRoom(meta.Key); err != nil {
		return err
	}
	return m.Store.Create(meta)
}

func (m *Maker) makeRoom(key string) error {
	limit := m.limits().MaxKept
	all, err := m.Store.List()
	if err != nil {
		return err
	}
	var others []template.Meta
	for _, t := range all {
		if t.Key != key {
			others = append(others, t)
		}
	}
	if len(others) < limit {
		return nil
	}
	needed, err := m.inUse()
	if err != nil {
		return fmt.Errorf("which templates clones need: %w", err)
	}
	victims := evictable(others, needed, m.Store.LastUsed)
	for len(others) >= limit {
		if len(victims) == 0 {
			return fmt.Errorf("the node keeps %d templates (libvirt.template_max_kept), each being made or needed by a clone: %w",
				len(others), errdefs.ErrResourceExhausted)
		}
		v := victims[0]
		victims = victims[1:]
		if err := m.Store.Remove(v.Key); err != nil {
			return fmt.Errorf("remove template %s to make room: %w", v.Key, err)
		}
		m.R.Log.Info("template removed to make room for another", "template", v.Key, "image", v.Image,
			"namespace", v.Namespace, "state", v.State, "kept", limit)
		for i, t := range others {
			if t.Key == v.Key {
				others = append(others[:i], others[i+1:]...)
				break
			}
		}
	}
	return nil
}

// evictable are the templates of all that may be removed, in the order
// to remove them: failed ones (oldest first), then ready ones that no
// clone needs, least recently used first. Templates being made are not.
func evictable(all []template.Meta, needed map[string]bool, lastUsed func(string) time.Time) []template.Meta {
	var failed, ready []template.Meta
	used := map[string]time.Time{}
	for _, t := range all {
		switch {
		case t.State == template.Failed:
			failed = append(failed, t)
		case t.State == template.Ready && !needed[t.Key]:
			ready = append(ready, t)
			used[t.Key] = lastUsed(t.Key)
		}
	}
	sort.SliceStable(failed, func(i, j int) bool { return failed[i].CreatedAt < failed[j].CreatedAt })
	sort.SliceStable(ready, func(i, j int) bool { return used[ready[i].Key].Before(used[ready[j].Key]) })
	return append(failed, ready...)
}

// inUse are the templates a clone may still read: planned for one a
// moment ago (useGrace), or named by a container record whose VM has
// not started yet (its first start restores it from the template).
func (m *Maker) inUse() (map[string]bool, error) {
	out := map[string]bool{}
	m.mu.Lock()
	for k, at := range m.used {
		if time.Since(at) < useGrace {
			out[k] = true
		} else {
			delete(m.used, k)
		}
	}
	m.mu.Unlock()
	cs, err := m.R.Store.Containers()
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if k := c.Clone.GetKey(); k != "" && c.StartedAt == 0 && !c.Removing {
			out[k] = true
		}
	}
	return out, nil
}
