package instant

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/resize"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/vmtypes"
)

// The VM API's templates (vmtypes.Templates): listed, made ahead of the
// pods that start from them (crimuxctl template warm), removed.

// errTemplatesOff refuses template calls on a node whose templates are off.
func (r *Room) errTemplatesOff() error {
	if r.Maker == nil {
		return fmt.Errorf("templates are off on this node (libvirt.templates = false): %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// ListTemplates lists the templates, with what their files take.
func (r *Room) ListTemplates(context.Context) ([]vmtypes.TemplateInfo, error) {
	if err := r.errTemplatesOff(); err != nil {
		return nil, err
	}
	all, err := r.Maker.Store.List()
	if err != nil {
		return nil, err
	}
	out := make([]vmtypes.TemplateInfo, 0, len(all))
	for _, m := range all {
		out = append(out, r.templateInfo(m))
	}
	return out, nil
}

// WarmTemplate makes w.Image's template in the shape a VM pod of
// w.VCPUs and w.MemoryMiB gets, for the pods of w.Namespace (the key a
// pod of that namespace then asks for), and waits for it. w.Namespace
// is required unless templates are shared across namespaces.
func (r *Room) WarmTemplate(ctx context.Context, w vmtypes.TemplateWarm) (vmtypes.TemplateInfo, error) {
	if err := r.errTemplatesOff(); err != nil {
		return vmtypes.TemplateInfo{}, err
	}
	// Refused before the image is prepared: Make refuses it too.
	if err := r.Maker.CheckNamespace(w.Namespace); err != nil {
		return vmtypes.TemplateInfo{}, err
	}
	layout, err := r.R.Images.Prepare(ctx, w.Image)
	if err != nil {
		return vmtypes.TemplateInfo{}, err
	}
	res := vm.Resources{VCPUs: uint(w.VCPUs), MemoryMiB: w.MemoryMiB}
	maxVCPUs, maxMemoryMiB := resize.Headroom(r.R.Opts, res)
	req := Request{Image: w.Image, Layout: layout, Namespace: w.Namespace, Shape: template.Shape{VCPUs: res.VCPUs, MaxVCPUs: maxVCPUs,
		MemoryMiB: res.MemoryMiB, MaxMemoryMiB: maxMemoryMiB, Accel: r.R.Accel}}
	m, err := r.Maker.Make(ctx, req)
	return r.templateInfo(m), err
}

// RemoveTemplate removes template key; NotFound if there is none.
func (r *Room) RemoveTemplate(_ context.Context, key string) error {
	if err := r.errTemplatesOff(); err != nil {
		return err
	}
	m, err := r.Maker.Store.Get(key)
	if err != nil {
		return err
	}
	if m.State == template.Making {
		return fmt.Errorf("template %s is being made: remove it once it is ready or failed: %w", key, errdefs.ErrFailedPrecondition)
	}
	if err := r.Maker.Store.Remove(key); err != nil {
		return err
	}
	r.R.Log.Info("template removed", "template", key, "image", m.Image, "dir", filepath.Join(r.Maker.Store.Dir, key))
	return nil
}

// templateInfo is m as the VM API shows it, with what its files take.
func (r *Room) templateInfo(m template.Meta) vmtypes.TemplateInfo {
	info := vmtypes.TemplateInfo{Key: m.Key, Namespace: m.Namespace, Image: m.Image, ImageDigest: m.ImageDigest,
		VCPUs: uint32(m.Shape.VCPUs), MaxVCPUs: uint32(m.Shape.MaxVCPUs), MemoryMiB: m.Shape.MemoryMiB,
		MaxMemoryMiB: m.Shape.MaxMemoryMiB, Accel: m.Shape.Accel, State: m.State, Error: m.Error,
		CreatedAt: m.CreatedAt, ReadyAt: m.ReadyAt}
	if m.Key != "" {
		if bytes, _, err := (template.Store{Dir: r.Maker.Store.Paths(m.Key).Dir}).Usage(); err == nil {
			info.SizeBytes = bytes
		}
	}
	return info
}
