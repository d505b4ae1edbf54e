// Package snapcarry carries a VM pod's snapshots from one of its VMs to
// the next: their libvirt metadata saved into the pod's directory when a
// VM goes, and redefined on the domain of the pod's next VM, which boots
// the same root disk.
package snapcarry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// Snapshots live inside the pod's root disk (libvirt internal snapshots),
// which outlives the pod's containers; libvirt keeps their metadata with
// the domain, and each container is a domain of its own. So crimux carries
// the metadata over: saved into the pod's directory when a container of a
// pod that lives on goes (and taken from the previous container's domain
// while it is still defined), and redefined on the next container's
// domain, with that domain's own definition inside, when it boots the same
// disk.
//
//	<state>/pods/<sandbox id>/snapshots/<name>.xml   one per snapshot
//	<state>/pods/<sandbox id>/snapshots/current      the current one's name
const (
	snapshotsDir        = "snapshots"
	currentSnapshotFile = "current"
)

// Carrier carries the snapshots of the VM pods whose directories are in
// StateDir, whose records are in Store.
type Carrier struct {
	StateDir string
	Store    *store.Store
}

func (k Carrier) dir(sbID string) string {
	return filepath.Join(vmfiles.PodDir(k.StateDir, sbID), snapshotsDir)
}

// Save writes the snapshot metadata of VM c's domain into its pod's
// directory, replacing what was there; a domain that is gone has nothing
// to save.
func (k Carrier) Save(l virt.Libvirt, c *store.Container) error {
	dom, err := l.Lookup(c.Domain)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	snaps, err := l.ListSnapshots(dom)
	if err != nil {
		return err
	}
	dir := k.dir(c.SandboxID)
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	for _, s := range snaps {
		if err := saveSnapshot(l, s, tmp); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func saveSnapshot(l virt.Libvirt, s virt.Snapshot, dir string) error {
	doc, err := l.SnapshotXML(s)
	if err != nil {
		return fmt.Errorf("snapshot %q: %w", s.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, s.Name+".xml"), []byte(doc), 0o600); err != nil {
		return err
	}
	if cur, err := l.IsCurrentSnapshot(s); err == nil && cur {
		return os.WriteFile(filepath.Join(dir, currentSnapshotFile), []byte(s.Name), 0o600)
	}
	return nil
}

// Keep saves the snapshots of VM c, going, when its pod lives on with
// the disk they are in and c is the pod's newest VM (an older one's are
// out of date). Only a failed save is an error.
func (k Carrier) Keep(l virt.Libvirt, c *store.Container) error {
	sb, err := k.Store.Sandbox(c.SandboxID)
	if err != nil || sb.Removing || sb.Disk == nil {
		return nil
	}
	if newest, err := k.NewestVMOf(sb.ID, ""); err != nil || newest == nil || newest.ID != c.ID {
		return nil
	}
	return k.Save(l, c)
}

// NewestVMOf is the most recently created VM record of pod sbID other
// than except (any state); nil if none.
func (k Carrier) NewestVMOf(sbID, except string) (*store.Container, error) {
	all, err := k.Store.Containers()
	if err != nil {
		return nil, err
	}
	var newest *store.Container
	for _, c := range all {
		if c.SandboxID == sbID && c.ID != except && (newest == nil || c.CreatedAt > newest.CreatedAt) {
			newest = c
		}
	}
	return newest, nil
}

// Forget drops the saved snapshot metadata of pod sbID (its root disk
// was replaced).
func (k Carrier) Forget(sbID string) error {
	return os.RemoveAll(k.dir(sbID))
}

// Carry redefines the snapshots saved for pod sbID on dom, the domain of
// its new container, oldest first (a parent before its children). It
// returns how many.
func (k Carrier) Carry(l virt.Libvirt, dom virt.Domain, sbID string) (int, error) {
	snaps, current, err := loadSnapshots(k.dir(sbID))
	if err != nil || len(snaps) == 0 {
		return 0, err
	}
	doc, err := l.XML(dom)
	if err != nil {
		return 0, err
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(doc); err != nil {
		return 0, fmt.Errorf("domain %s: %w", dom.Name, err)
	}
	for i, s := range snaps {
		s.Domain, s.InactiveDomain, s.Cookie = &def, nil, nil
		out, err := s.Marshal()
		if err != nil {
			return i, err
		}
		if _, err := l.RedefineSnapshot(dom, out, s.Name == current); err != nil {
			return i, fmt.Errorf("redefine snapshot %q on %s: %w", s.Name, dom.Name, err)
		}
	}
	return len(snaps), nil
}

// loadSnapshots reads the saved snapshots, oldest first.
func loadSnapshots(dir string) ([]libvirtxml.DomainSnapshot, string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	} else if err != nil {
		return nil, "", err
	}
	var out []libvirtxml.DomainSnapshot
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".xml") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, "", err
		}
		var s libvirtxml.DomainSnapshot
		if err := s.Unmarshal(string(b)); err != nil {
			return nil, "", fmt.Errorf("saved snapshot %s: %w", e.Name(), err)
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return created(out[i]) < created(out[j]) })
	cur, _ := os.ReadFile(filepath.Join(dir, currentSnapshotFile))
	return out, string(cur), nil
}

func created(s libvirtxml.DomainSnapshot) int64 {
	n, _ := strconv.ParseInt(s.CreationTime, 10, 64)
	return n
}
