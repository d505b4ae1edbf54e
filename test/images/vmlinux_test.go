package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// fakeELF is a minimal x86-64 ELF whose one PT_NOTE segment holds the
// notes given (name, type, 4-byte desc each).
func fakeELF(t *testing.T, machine uint16, notes map[string]uint32) []byte {
	t.Helper()
	var note bytes.Buffer
	for name, typ := range notes {
		n := append([]byte(name), 0)
		for len(n)%4 != 0 {
			n = append(n, 0)
		}
		_ = binary.Write(&note, binary.LittleEndian, []uint32{uint32(len(name) + 1), 4, typ})
		note.Write(n)
		note.Write([]byte{1, 2, 3, 4})
	}
	const ehsize, phsize = 64, 56
	var b bytes.Buffer
	ident := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b.Write(ident)
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	le(uint16(2))                                           // ET_EXEC
	le(machine)                                             // e_machine
	le(uint32(1))                                           // e_version
	le(uint64(0x1000000))                                   // e_entry
	le(uint64(ehsize))                                      // e_phoff
	le(uint64(0))                                           // e_shoff
	le(uint32(0))                                           // e_flags
	le([]uint16{ehsize, phsize, 1, 64, 0, 0})               // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
	le([]uint32{4, 0})                                      // PT_NOTE, flags
	le([]uint64{ehsize + phsize, 0, 0})                     // offset, vaddr, paddr
	le([]uint64{uint64(note.Len()), uint64(note.Len()), 4}) // filesz, memsz, align
	b.Write(note.Bytes())
	return b.Bytes()
}

// fakeBzImage wraps payload (already compressed) in a setup header as the
// kernel's build does, its length appended.
func fakeBzImage(payload []byte, size int) []byte {
	const setupSects = 3
	start := (setupSects + 1) * 512
	b := make([]byte, start+100)
	b[0x1f1] = setupSects
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	p := binary.LittleEndian.AppendUint32(append([]byte(nil), payload...), uint32(size))
	binary.LittleEndian.PutUint32(b[0x248:], 100)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(p)))
	return append(b, p...)
}

func compressWith(t *testing.T, format string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch format {
	case "gzip":
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(data)
		zw.Close()
	case "xz":
		cmd := exec.Command("xz", "-c", "--check=crc32")
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("xz -c: %v", err)
		}
		return out
	case "lz4":
		zw := lz4.NewWriter(&buf)
		if err := zw.Apply(lz4.LegacyOption(true)); err != nil {
			t.Fatal(err)
		}
		zw.Write(data)
		zw.Close()
	}
	return buf.Bytes()
}

func TestPVHKernel(t *testing.T) {
	pvh := fakeELF(t, 62, map[string]uint32{"Xen": xenElfNotePhys32Entry, "Linux": 1})
	for _, format := range []string{"gzip", "zstd", "lz4", "xz"} {
		t.Run(format, func(t *testing.T) {
			got, err := pvhKernel(fakeBzImage(compressWith(t, format, pvh), len(pvh)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pvh) {
				t.Fatalf("got %d bytes, want the %d of the ELF", len(got), len(pvh))
			}
		})
	}

	refused := []struct {
		name, want string
		bz         []byte
	}{
		{"no PVH note", "no PVH entry", func() []byte {
			e := fakeELF(t, 62, map[string]uint32{"Xen": 6, "Linux": xenElfNotePhys32Entry})
			return fakeBzImage(compressWith(t, "gzip", e), len(e))
		}()},
		{"not x86-64", "is for EM_AARCH64", func() []byte {
			e := fakeELF(t, 183, map[string]uint32{"Xen": xenElfNotePhys32Entry})
			return fakeBzImage(compressWith(t, "gzip", e), len(e))
		}()},
		{"length not the payload's", "the payload says 7", fakeBzImage(compressWith(t, "gzip", pvh), 7)},
		{"unknown format", "not read here", fakeBzImage([]byte("BZh91AY&SY"), len(pvh))},
		{"not a bzImage", "no HdrS", pvh},
		{"payload past the end", "outside", func() []byte {
			b := fakeBzImage(compressWith(t, "gzip", pvh), len(pvh))
			binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(b)))
			return b
		}()},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, err := pvhKernel(c.bz)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestPVHKernelOfTheHost reads the test bed's guest kernel, when this
// machine has one: Debian's cloud kernel is PVH-bootable.
func TestPVHKernelOfTheHost(t *testing.T) {
	found, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	if len(found) == 0 {
		t.Skip("no /boot/vmlinuz-*-cloud-amd64 here")
	}
	bz, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	vmlinux, err := pvhKernel(bz)
	if err != nil {
		t.Fatal(err)
	}
	if len(vmlinux) <= len(bz) {
		t.Fatalf("%s: %d bytes uncompressed from a %d-byte bzImage", found[0], len(vmlinux), len(bz))
	}
}
