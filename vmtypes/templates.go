package vmtypes

import "context"

// Templates is a VM runtime's templates (issue 39): an image booted once
// in a shape and saved, which VM pods asking for it are restored from.
// A registry ability of its own: a runtime without templates has none.
type Templates interface {
	ListTemplates(ctx context.Context) ([]TemplateInfo, error)
	// WarmTemplate makes the template of image in the shape of a pod with
	// vcpus and memoryMiB, and returns it ready.
	WarmTemplate(ctx context.Context, image string, vcpus uint32, memoryMiB uint64) (TemplateInfo, error)
	RemoveTemplate(ctx context.Context, key string) error
}

// TemplateInfo is one template.
type TemplateInfo struct {
	Key, Image, ImageDigest string
	VCPUs, MaxVCPUs         uint32
	MemoryMiB, MaxMemoryMiB uint64
	Accel                   string
	// State is making, ready or failed (Error says why).
	State, Error       string
	CreatedAt, ReadyAt int64 // Unix nanoseconds
	SizeBytes          uint64
}
