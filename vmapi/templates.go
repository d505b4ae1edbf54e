package vmapi

import (
	"context"
	"fmt"

	"github.com/crimux/crimux/internal/errdefs"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// templateRuntimes are the registry's backends with templates.
func templateRuntimes(reg *registry.Registry) []vmtypes.Templates {
	var out []vmtypes.Templates
	for _, rt := range reg.Backends() {
		if t, ok := registry.Ability[vmtypes.Templates](rt); ok {
			out = append(out, t)
		}
	}
	return out
}

// ListTemplates lists every VM runtime's templates.
func (s *Server) ListTemplates(ctx context.Context, _ *vmv1.ListTemplatesRequest) (*vmv1.ListTemplatesResponse, error) {
	resp := &vmv1.ListTemplatesResponse{}
	for _, rt := range templateRuntimes(s.routed(ctx)) {
		list, err := rt.ListTemplates(ctx)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		for _, t := range list {
			resp.Templates = append(resp.Templates, templateOf(t))
		}
	}
	return resp, nil
}

// Bounds of a warmed template's shape.
const (
	minTemplateMemoryMiB = 64
	maxTemplateVCPUs     = 1024
)

// WarmTemplate makes a template in the first VM runtime with templates.
func (s *Server) WarmTemplate(ctx context.Context, req *vmv1.WarmTemplateRequest) (*vmv1.WarmTemplateResponse, error) {
	switch {
	case req.GetImage() == "":
		return nil, errdefs.Invalid("image", "must name an image")
	case req.GetVcpus() < 1 || req.GetVcpus() > maxTemplateVCPUs:
		return nil, errdefs.Invalid("vcpus", "%d is not within 1 and %d", req.GetVcpus(), maxTemplateVCPUs)
	case req.GetMemoryMib() < minTemplateMemoryMiB:
		return nil, errdefs.Invalid("memory_mib", "%d is less than %d", req.GetMemoryMib(), minTemplateMemoryMiB)
	}
	rts := templateRuntimes(s.routed(ctx))
	if len(rts) == 0 {
		return nil, fmt.Errorf("no VM runtime makes templates (libvirt.templates = false?): %w", errdefs.ErrFailedPrecondition)
	}
	t, err := rts[0].WarmTemplate(ctx, vmtypes.TemplateWarm{Namespace: req.GetNamespace(), Image: req.GetImage(),
		VCPUs: req.GetVcpus(), MemoryMiB: req.GetMemoryMib()})
	if err != nil {
		return nil, fmt.Errorf("template of %s: %w", req.GetImage(), err)
	}
	return &vmv1.WarmTemplateResponse{Template: templateOf(t)}, nil
}

// RemoveTemplate removes a template from the runtime that has it.
func (s *Server) RemoveTemplate(ctx context.Context, req *vmv1.RemoveTemplateRequest) (*vmv1.RemoveTemplateResponse, error) {
	if req.GetKey() == "" {
		return nil, errdefs.Invalid("key", "must name a template (crimuxctl template list)")
	}
	err := fmt.Errorf("template %s: %w", req.GetKey(), errdefs.ErrNotFound)
	for _, rt := range templateRuntimes(s.routed(ctx)) {
		if err = rt.RemoveTemplate(ctx, req.GetKey()); !errdefs.IsNotFound(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return &vmv1.RemoveTemplateResponse{}, nil
}

func templateOf(t vmtypes.TemplateInfo) *vmv1.Template {
	return &vmv1.Template{Key: t.Key, Namespace: t.Namespace, Image: t.Image, ImageDigest: t.ImageDigest, Vcpus: t.VCPUs, MaxVcpus: t.MaxVCPUs,
		MemoryMib: t.MemoryMiB, MaxMemoryMib: t.MaxMemoryMiB, Accel: t.Accel, State: t.State, Error: t.Error,
		CreatedAt: t.CreatedAt, ReadyAt: t.ReadyAt, SizeBytes: t.SizeBytes}
}
