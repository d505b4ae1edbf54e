package instant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// FormatVersion is in every template's key: a crimux whose templates or
// clones differ from an older one's makes its own.
var FormatVersion = version.Version + "/t1"

// DefaultParent is the cgroup templates are made under.
const DefaultParent = "/crimux-templates"

// DefaultMakeTimeout bounds one making: boot, settling, saving.
const DefaultMakeTimeout = 10 * time.Minute

// Maker makes templates, one making per key at a time.
type Maker struct {
	R     *core.Runtime
	Store template.Store
	// Parent is the cgroup parent of templates being made ("" is
	// DefaultParent); Timeout bounds a making (0 is DefaultMakeTimeout).
	Parent  string
	Timeout time.Duration
	// NIC makes a template's NIC with mac (nil: a tap alone in a network
	// namespace of its own, isolatedNIC; tests give another).
	NIC func(mac string) (open func(fd string) (*os.File, []string, error), closeNIC func(), err error)

	// Restores take turns restoring clones.
	Restores Restores

	mu     sync.Mutex
	making map[string]chan struct{}
}

// Request is what a template is made of: an image and a shape.
type Request struct {
	Image  string
	Layout core.ImageLayout
	Shape  template.Shape
}

// Key is the key of req's template.
func Key(req Request) string { return template.Key(req.Layout.Digest, req.Shape, FormatVersion) }

// Recover marks every template left in state making failed: the crimux
// that made it stopped (its domain is the collector's to remove).
func (m *Maker) Recover() error {
	all, err := m.Store.List()
	if err != nil {
		return err
	}
	for _, meta := range all {
		if meta.State == template.Making {
			meta.State, meta.Error = template.Failed, "crimux stopped while it was being made"
			if err := m.Store.Put(meta); err != nil {
				return err
			}
			m.R.Log.Warn("template left half made by an earlier crimux: failed", "template", meta.Key, "image", meta.Image)
		}
	}
	return nil
}

// Get is req's template as it is now: NotFound if there is none.
func (m *Maker) Get(req Request) (template.Meta, error) { return m.Store.Get(Key(req)) }

// Start makes req's template in the background unless there is one
// already (ready, failed or being made).
func (m *Maker) Start(req Request) {
	if _, err := m.Get(req); !errdefs.IsNotFound(err) {
		return
	}
	go func() {
		if _, err := m.Make(context.Background(), req); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			m.R.Log.Warn("template not made", "image", req.Image, "shape", req.Shape.String(), "err", err)
		}
	}()
}

// Make makes req's template and returns it ready; a template that is
// being made is waited for, one that exists is returned as it is
// (failed ones too: remove them to make them again).
func (m *Maker) Make(ctx context.Context, req Request) (template.Meta, error) {
	key := Key(req)
	for {
		wait, mine := m.claim(key)
		if mine {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return template.Meta{}, ctx.Err()
		}
	}
	defer m.release(key)
	if meta, err := m.Store.Get(key); err == nil {
		if meta.State == template.Failed {
			return meta, fmt.Errorf("template %s of %s failed: %s (remove it to make it again): %w", key, req.Image, meta.Error, errdefs.ErrFailedPrecondition)
		}
		return meta, nil
	} else if !errdefs.IsNotFound(err) {
		return meta, err
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultMakeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	meta, err := m.make(ctx, req, key)
	if err != nil {
		return meta, err
	}
	m.R.Log.Info("template made", "template", key, "image", req.Image, "shape", req.Shape.String(), "took", time.Since(start).Round(time.Millisecond))
	return meta, nil
}

// claim makes this caller key's maker, or returns what to wait for.
func (m *Maker) claim(key string) (wait <-chan struct{}, mine bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch, ok := m.making[key]; ok {
		return ch, false
	}
	if m.making == nil {
		m.making = map[string]chan struct{}{}
	}
	m.making[key] = make(chan struct{})
	return nil, true
}

func (m *Maker) release(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.making[key])
	delete(m.making, key)
}

// make makes template key: its meta first (making), then the VM, then
// the meta again (ready, or failed with the error, its files removed).
func (m *Maker) make(ctx context.Context, req Request, key string) (meta template.Meta, err error) {
	meta = template.Meta{Key: key, Image: req.Image, ImageDigest: req.Layout.Digest, Shape: req.Shape,
		Version: FormatVersion, CreatedAt: time.Now().UnixNano()}
	if err := m.Store.Create(meta); err != nil {
		return meta, err
	}
	meta.State = template.Making
	p := m.Store.Paths(key)
	defer func() {
		if err == nil {
			return
		}
		removeFiles(p)
		meta.State, meta.Error = template.Failed, err.Error()
		if perr := m.Store.Put(meta); perr != nil {
			m.R.Log.Error("record a failed template", "template", key, "err", perr)
		}
	}()
	if req.Layout.DiskPath == "" || req.Layout.Kernel != "" {
		return meta, fmt.Errorf("image %s: only images with a disk and no kernel of their own can be templates", req.Image)
	}
	offset, identity, err := m.bootAndSave(ctx, req, p, key)
	if err != nil {
		return meta, err
	}
	if err := lockUp(p, identity); err != nil {
		return meta, err
	}
	meta.State, meta.StreamOffset, meta.ReadyAt = template.Ready, offset, time.Now().UnixNano()
	return meta, m.Store.Put(meta)
}

// removeFiles removes what a failed making left, its meta and the
// template's console log (why it failed) kept.
func removeFiles(p template.Paths) {
	for _, f := range []string{p.State, p.Disk, p.CIData, filepath.Join(p.Dir, core.RunDir)} {
		_ = os.RemoveAll(f)
	}
	_ = os.Chmod(p.Dir, 0o700)
}

// lockUp makes a made template's files root's alone: no qemu opens them
// again (clones get copies, and the save image through libvirtd).
func lockUp(p template.Paths, id *store.VMIdentity) error {
	if err := os.RemoveAll(filepath.Join(p.Dir, core.RunDir)); err != nil {
		return err
	}
	for _, f := range []string{p.State, p.Disk, p.CIData} {
		if id != nil { // given to the making qemu's identity
			if err := os.Lchown(f, 0, 0); err != nil {
				return fmt.Errorf("template file %s: %w", f, err)
			}
		}
		if err := os.Chmod(f, 0o600); err != nil {
			return fmt.Errorf("template file %s: %w", f, err)
		}
	}
	return os.Chmod(p.Dir, 0o700)
}
