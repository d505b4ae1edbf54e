package instant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// make makes template key: its meta first (making), then the VM, then
// the meta again (ready, or failed with the error, its files removed).
func (m *Maker) make(ctx context.Context, req Request, key string) (meta template.Meta, err error) {
	meta = template.Meta{Key: key, Namespace: m.namespace(req), Image: req.Image, ImageDigest: req.Layout.Digest, Shape: req.Shape,
		Version: FormatVersion, CreatedAt: time.Now().UnixNano()}
	if err := m.create(meta); err != nil {
		return meta, err
	}
	// Runs after the deferred func below, on the error it settles.
	defer func() { m.R.Counters.TemplateMakingEnded(makingResult(ctx, err)) }()
	meta.State = template.Making
	p := m.Store.Paths(key)
	defer func() {
		if err == nil {
			return
		}
		if errors.Is(context.Cause(ctx), errNobodyAsks) {
			// Cancelled, not failed: nothing left, made again when asked.
			if rerr := m.Store.Remove(key); rerr != nil {
				m.R.Log.Error("remove a cancelled template", "template", key, "err", rerr)
			}
			err = fmt.Errorf("template %s: %w", key, errNobodyAsks)
			return
		}
		removeFiles(p)
		meta.State, meta.Error, meta.FailedAt = template.Failed, err.Error(), time.Now().UnixNano()
		if perr := m.Store.Put(meta); perr != nil {
			m.R.Log.Error("record a failed template", "template", key, "err", perr)
		}
	}()
	if req.Layout.DiskPath == "" || req.Layout.Kernel != "" {
		return meta, fmt.Errorf("image %s: only images with a disk and no kernel of their own can be templates", req.Image)
	}
	boot := m.boot
	if boot == nil {
		boot = m.bootAndSave
	}
	offset, identity, err := boot(ctx, req, p, key)
	if err != nil {
		return meta, err
	}
	if err := lockUp(p, identity); err != nil {
		return meta, err
	}
	meta.State, meta.StreamOffset, meta.ReadyAt = template.Ready, offset, time.Now().UnixNano()
	return meta, m.Store.Put(meta)
}

// makingResult is how a making that returned err ended (Counters):
// cancelled when no pod asked for it any more, as make records it.
func makingResult(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return vmcounters.MakingReady
	case errors.Is(context.Cause(ctx), errNobodyAsks):
		return vmcounters.MakingCancelled
	}
	return vmcounters.MakingFailed
}

// removeFiles removes what a failed making left, its meta and the
// template's console log (why it failed) kept.
func removeFiles(p template.Paths) {
	for _, f := range []string{p.State, p.Disk, p.CIData, filepath.Join(p.Dir, vmfiles.RunDir)} {
		_ = os.RemoveAll(f)
	}
	_ = os.Chmod(p.Dir, 0o700)
}

// lockUp makes a made template's files root's alone: no qemu opens them
// again (clones get copies, and the save image through libvirtd).
func lockUp(p template.Paths, id *store.VMIdentity) error {
	if err := os.RemoveAll(filepath.Join(p.Dir, vmfiles.RunDir)); err != nil {
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
