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
// made by a crimux version (whose domains may differ from another's).
func Key(imageDigest string, s Shape, version string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%d\x00%s\x00%s",
		imageDigest, s.VCPUs, s.MaxVCPUs, s.MemoryMiB, s.MaxMemoryMiB, s.Accel, version))
	return hex.EncodeToString(sum[:8])
}
