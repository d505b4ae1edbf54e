package main

// The test VM boots its kernel through PVH: qemu loads the uncompressed
// kernel (an ELF with a PVH entry note) and jumps to its 32-bit entry, so
// the guest skips the bzImage's self-decompression and relocation. Under
// TCG that is a fifth of the guest's boot (Debian's cloud kernel 6.1,
// LZ4-compressed: 2.87 s of qemu CPU to CRIMUX-VM-BOOTED from the
// bzImage, 2.29 s through PVH; medians of 8 boots each, taking turns, one
// guest alone), and the bench boots 100 of them at once.

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// xenElfNotePhys32Entry is the note a PVH-bootable kernel carries
// (XEN_ELFNOTE_PHYS32_ENTRY, in a note named "Xen").
const xenElfNotePhys32Entry = 18

// maxVmlinux bounds a decompressed kernel (Debian's cloud kernel: 53 MB).
const maxVmlinux = 512 << 20

// pvhKernel returns the uncompressed kernel inside bzImage, or an error
// when it cannot: not a bzImage, a payload format this does not read, or
// a kernel without a PVH entry (then boot the bzImage as it is).
func pvhKernel(bzImage []byte) ([]byte, error) {
	payload, err := bzPayload(bzImage)
	if err != nil {
		return nil, err
	}
	vmlinux, err := decompressPayload(payload)
	if err != nil {
		return nil, err
	}
	if err := checkPVH(vmlinux); err != nil {
		return nil, err
	}
	return vmlinux, nil
}

// bzPayload is the compressed kernel of a bzImage (the x86 boot
// protocol's setup header: payload_offset and payload_length, from 2.08).
func bzPayload(b []byte) ([]byte, error) {
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS setup header)")
	}
	if v := binary.LittleEndian.Uint16(b[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %d.%02d has no payload fields (want 2.08)", v>>8, v&0xff)
	}
	setupSects := int(b[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects + 1) * 512
	off, n := int(binary.LittleEndian.Uint32(b[0x248:])), int(binary.LittleEndian.Uint32(b[0x24c:]))
	if n < 4 || start+off < 0 || start+off+n > len(b) {
		return nil, fmt.Errorf("payload %d+%d is outside the %d-byte bzImage", start+off, n, len(b))
	}
	return b[start+off : start+off+n], nil
}

// decompressPayload decompresses a kernel payload: the compressed
// vmlinux, then its length (4 bytes, little-endian), as the kernel's
// build appends it to every format.
func decompressPayload(p []byte) ([]byte, error) {
	want := int(binary.LittleEndian.Uint32(p[len(p)-4:]))
	if want > maxVmlinux {
		return nil, fmt.Errorf("payload says its kernel is %d bytes", want)
	}
	data := p[:len(p)-4]
	var out []byte
	var err error
	switch {
	case bytes.HasPrefix(data, []byte{0x1f, 0x8b}):
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(data)); err == nil {
			zr.Multistream(false)
			out, err = readAllBounded(zr)
		}
	case bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		var zr *zstd.Decoder
		if zr, err = zstd.NewReader(bytes.NewReader(data)); err == nil {
			out, err = readAllBounded(zr)
			zr.Close()
		}
	case bytes.HasPrefix(data, []byte{0x02, 0x21, 0x4c, 0x18}): // LZ4, legacy frames
		out, err = readAllBounded(lz4.NewReader(bytes.NewReader(data)))
	case bytes.HasPrefix(data, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		out, err = toolDecompress("xz", bytes.NewReader(data))
	default:
		return nil, fmt.Errorf("payload format % x not read here (gzip, zstd, lz4, xz are)", data[:min(len(data), 6)])
	}
	if err != nil {
		return nil, fmt.Errorf("decompressing the kernel: %w", err)
	}
	if len(out) != want {
		return nil, fmt.Errorf("decompressed %d bytes, the payload says %d", len(out), want)
	}
	return out, nil
}

// readAllBounded reads r to its end, up to one byte past maxVmlinux.
func readAllBounded(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, maxVmlinux+1))
}

// checkPVH accepts an x86-64 ELF kernel with a PVH entry note.
func checkPVH(vmlinux []byte) error {
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return fmt.Errorf("the decompressed kernel: %w", err)
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("the decompressed kernel is for %s", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		if hasNote(notes, "Xen", xenElfNotePhys32Entry) {
			return nil
		}
	}
	return errors.New("the kernel has no PVH entry (XEN_ELFNOTE_PHYS32_ENTRY; CONFIG_PVH)")
}

// hasNote walks ELF notes (namesz, descsz, type, name, desc; 4-aligned).
func hasNote(b []byte, name string, typ uint32) bool {
	align := func(n int) int { return (n + 3) &^ 3 }
	for len(b) >= 12 {
		namesz := int(binary.LittleEndian.Uint32(b))
		descsz := int(binary.LittleEndian.Uint32(b[4:]))
		t := binary.LittleEndian.Uint32(b[8:])
		b = b[12:]
		if namesz < 0 || descsz < 0 || align(namesz) > len(b) || align(namesz)+align(descsz) > len(b) {
			return false
		}
		if t == typ && string(bytes.TrimRight(b[:namesz], "\x00")) == name {
			return true
		}
		b = b[align(namesz)+align(descsz):]
	}
	return false
}
