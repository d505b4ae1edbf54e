package template

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Shape is what a template is made for besides its image: what a clone's
// domain takes from it (qemu loads the template's device state, so the
// vCPU and memory slots, the accelerator and the way it boots are the
// template's).
type Shape struct {
	VCPUs        uint   `json:"vcpus"`
	MaxVCPUs     uint   `json:"max_vcpus"`
	MemoryMiB    uint64 `json:"memory_mib"`
	MaxMemoryMiB uint64 `json:"max_memory_mib"`
	Accel        string `json:"accel"`
}

func (s Shape) String() string {
	return fmt.Sprintf("%d vCPUs (up to %d), %d MiB (up to %d), %s", s.VCPUs, s.MaxVCPUs, s.MemoryMiB, s.MaxMemoryMiB, s.Accel)
}

// Key names the template of an image (its manifest digest) in a shape,
// made by a crimux version (whose domains may differ from another's) for
// the pods of namespace ("" for a template that serves every namespace:
// its clones share its kernel's secrets, see docs/security.md). Its 64
// bits are a name, not a proof: a template is used only once its Meta is
// the request's in full (Meta.Mismatch).
func Key(namespace, imageDigest string, s Shape, version string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%s\x00%s",
		namespace, imageDigest, s.VCPUs, s.MaxVCPUs, s.MemoryMiB, s.MaxMemoryMiB, s.Accel, version))
	return hex.EncodeToString(sum[:8])
}

// Mismatch says how m differs from the template of imageDigest in shape
// s by version for namespace; nil if it is that template. A key names a
// template in 64 bits of a hash: another request can have the same, and
// template.json may have been written by something else than the maker.
func (m Meta) Mismatch(namespace, imageDigest string, s Shape, version string) error {
	switch {
	case m.Namespace != namespace:
		return fmt.Errorf("template %s serves namespace %q, not %q", m.Key, m.Namespace, namespace)
	case m.ImageDigest != imageDigest:
		return fmt.Errorf("template %s is of image %s, not %s", m.Key, m.ImageDigest, imageDigest)
	case m.Shape != s:
		return fmt.Errorf("template %s is in shape %s, not %s", m.Key, m.Shape, s)
	case m.Version != version:
		return fmt.Errorf("template %s was made by crimux %s, not %s", m.Key, m.Version, version)
	}
	return nil
}
