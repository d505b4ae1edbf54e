package vmtypes

import "context"

// Templates is a VM runtime's templates: an image booted once
// in a shape and saved, which VM pods asking for it are restored from.
// A registry ability of its own: a runtime without templates has none.
type Templates interface {
	ListTemplates(ctx context.Context) ([]TemplateInfo, error)
	// WarmTemplate makes the template w asks for, and returns it ready.
	WarmTemplate(ctx context.Context, w TemplateWarm) (TemplateInfo, error)
	RemoveTemplate(ctx context.Context, key string) error
}

// TemplateWarm asks for the template of Image in the shape of a pod
// with VCPUs and MemoryMiB, for the pods of Namespace. Namespace is
// required unless the runtime shares templates across namespaces (then
// it is ignored): each namespace has templates of its own, since a
// template's clones share its kernel's secrets.
type TemplateWarm struct {
	Namespace, Image string
	VCPUs            uint32
	MemoryMiB        uint64
}

// TemplateInfo is one template.
type TemplateInfo struct {
	Key, Image, ImageDigest string
	// Namespace is the namespace whose pods it serves; "" for every
	// namespace (templates shared across namespaces).
	Namespace               string
	VCPUs, MaxVCPUs         uint32
	MemoryMiB, MaxMemoryMiB uint64
	Accel                   string
	// State is making, ready or failed (Error says why).
	State, Error       string
	CreatedAt, ReadyAt int64 // Unix nanoseconds
	SizeBytes          uint64
}
