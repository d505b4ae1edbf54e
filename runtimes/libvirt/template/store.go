package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// The states of a template.
const (
	Making = "making" // being booted and saved
	Ready  = "ready"  // clones may be restored from it
	Failed = "failed" // its making failed (Meta.Error says why)
)

// Meta is what template.json says of a template.
type Meta struct {
	Key string `json:"key"`
	// Namespace is the namespace whose pods the template serves; "" for
	// every namespace (libvirt.template_share_across_namespaces).
	Namespace   string `json:"namespace,omitempty"`
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	Shape       Shape  `json:"shape"`
	Version     string `json:"crimux_version"`
	State       string `json:"state"`
	Error       string `json:"error,omitempty"`
	CreatedAt   int64  `json:"created_at"`
	ReadyAt     int64  `json:"ready_at,omitempty"`
	// FailedAt is when its making failed: it is made again only a while
	// after (0 in the meta of an older crimux: CreatedAt counts).
	FailedAt int64 `json:"failed_at,omitempty"`
	// StreamOffset is where qemu's stream starts in the save image.
	StreamOffset int64 `json:"stream_offset,omitempty"`
}

// Store is the templates' directory.
type Store struct{ Dir string }

// Paths are a template's files.
type Paths struct{ Dir, State, Disk, CIData, Meta string }

// Paths of the template key.
func (s Store) Paths(key string) Paths {
	dir := filepath.Join(s.Dir, key)
	return Paths{Dir: dir, State: filepath.Join(dir, "state"), Disk: filepath.Join(dir, "disk.qcow2"),
		CIData: filepath.Join(dir, "cidata.iso"), Meta: filepath.Join(dir, "template.json")}
}

// Create makes the template's directory (root's alone) and writes m, in
// state Making; AlreadyExists if there is one.
func (s Store) Create(m Meta) error {
	if !validKey(m.Key) {
		return errdefs.Invalid("template key", "%q is not 16 hex digits", m.Key)
	}
	// 0711: a template's making qemu opens its files (its directory is
	// 0711 then), and nothing lists them.
	if err := os.MkdirAll(s.Dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(s.Dir, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(s.Paths(m.Key).Dir, 0o700); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("template %s: %w", m.Key, errdefs.ErrAlreadyExists)
	} else if err != nil {
		return err
	}
	m.State = Making
	return s.Put(m)
}

// Put writes m, whole or not at all (a temporary file renamed).
func (s Store) Put(m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	p := s.Paths(m.Key).Meta
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Get reads template key's meta; NotFound if there is none.
func (s Store) Get(key string) (Meta, error) {
	var m Meta
	if !validKey(key) {
		return m, errdefs.Invalid("template key", "%q is not 16 hex digits", key)
	}
	b, err := os.ReadFile(s.Paths(key).Meta)
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("template %s: %w", key, errdefs.ErrNotFound)
	} else if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("template %s: %s: %w", key, s.Paths(key).Meta, err)
	}
	return m, nil
}

// List is every template whose meta reads, by key; a directory without
// one (a making cut short before its first write) is listed as Failed.
func (s Store) List() ([]Meta, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []Meta
	for _, e := range entries {
		if !e.IsDir() || !validKey(e.Name()) {
			continue
		}
		m, err := s.Get(e.Name())
		if err != nil {
			m = Meta{Key: e.Name(), State: Failed, Error: err.Error()}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Touch records that template key was used now (its meta's mtime, which
// Put sets too): LastUsed orders templates for eviction by it.
func (s Store) Touch(key string) error {
	if !validKey(key) {
		return errdefs.Invalid("template key", "%q is not 16 hex digits", key)
	}
	now := time.Now()
	return os.Chtimes(s.Paths(key).Meta, now, now)
}

// LastUsed is when template key was last used or written (Touch, Put);
// the zero time if its meta cannot be read.
func (s Store) LastUsed(key string) time.Time {
	if !validKey(key) {
		return time.Time{}
	}
	st, err := os.Stat(s.Paths(key).Meta)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// Remove deletes template key's directory; nothing there is no error.
func (s Store) Remove(key string) error {
	if !validKey(key) {
		return errdefs.Invalid("template key", "%q is not 16 hex digits", key)
	}
	return os.RemoveAll(s.Paths(key).Dir)
}

// Usage is the bytes and inodes the templates take on disk.
func (s Store) Usage() (bytes, inodes uint64, err error) {
	err = filepath.WalkDir(s.Dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		inodes++
		if st, ok := blocks(info); ok {
			bytes += st
		}
		return nil
	})
	return bytes, inodes, err
}

func validKey(k string) bool {
	if len(k) != 16 {
		return false
	}
	for _, c := range k {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
