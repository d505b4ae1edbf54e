package vmimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
)

// namesOtherFile is the fuzz oracle, written apart from checkQcow2 and
// simpler: does a qcow2 file name a backing file or an external data
// file, by any reading of its header?
func namesOtherFile(b []byte) bool {
	if len(b) < 16 || !bytes.HasPrefix(b, qcow2Magic) {
		return false
	}
	be := binary.BigEndian
	if be.Uint64(b[8:]) != 0 {
		return true
	}
	if len(b) >= 80 && be.Uint32(b[4:]) >= 3 && be.Uint64(b[72:])&incompatDataFile != 0 {
		return true
	}
	start := 72
	if len(b) >= 104 && be.Uint32(b[4:]) >= 3 {
		start = int(be.Uint32(b[100:]))
	}
	// Every extension chain qemu could follow within the first 2 MiB.
	for off := start; off >= 0 && off+8 <= len(b) && off < 1<<21; {
		typ, n := be.Uint32(b[off:]), int(be.Uint32(b[off+4:]))
		if typ == extEnd {
			break
		}
		if typ == extDataFile {
			return true
		}
		off += 8 + (n+7)&^7
	}
	return false
}

func FuzzDiskFormat(f *testing.F) {
	f.Add(qcow2ImageBits(9, nil))
	f.Add(qcow2ImageBits(9, func(b []byte) { be64(b, 8, 0x100); be32(b, 16, 4); copy(b[0x100:], "/etc") }))
	f.Add(qcow2ImageBits(9, func(b []byte) { be64(b, 72, incompatDataFile) }))
	f.Add(qcow2ImageBits(9, func(b []byte) {
		off := putExt(b, 112, 0xe2792aca, []byte("raw"))
		putExt(b, off, extDataFile, []byte("/dev/sda"))
	}))
	f.Add(qcow2ImageBits(9, func(b []byte) { be32(b, 4, 2); clear(b[72:112]) }))
	f.Add([]byte("raw bytes"))
	f.Fuzz(func(t *testing.T, b []byte) {
		format, err := diskFormat(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		isQcow2 := bytes.HasPrefix(b, qcow2Magic)
		if (format == FormatQcow2) != isQcow2 || (format != FormatQcow2 && format != FormatRaw) {
			t.Fatalf("format %q for a file starting %q", format, b[:min(4, len(b))])
		}
		if isQcow2 && namesOtherFile(b) {
			t.Fatal("accepted a qcow2 that names a backing or data file")
		}
	})
}

// FuzzExtract feeds two arbitrary tar layers through the whole pipeline:
// index, layout rules, copy, format check. Tar inputs are large and the
// fuzzer minimizes each new input for a minute by default, so run it with
// a short -fuzzminimizetime (5s); FuzzLayout explores the merge rules
// faster from a compact encoding.
func FuzzExtract(f *testing.F) {
	qcow := qcow2ImageBits(9, nil)
	backed := qcow2ImageBits(9, func(b []byte) { be64(b, 8, 0x100); be32(b, 16, 4); copy(b[0x100:], "/etc") })
	empty := tarLayer(f)
	seeds := [][2][]byte{
		{tarLayer(f, file("disk/a.qcow2", qcow)), empty},
		{tarLayer(f, file("disk/a.qcow2", backed)), empty},
		{tarLayer(f, file("disk/a.raw", []byte("raw")), file("disk/b.raw", []byte("raw"))), tarLayer(f, whiteout("disk", "b.raw"))},
		{tarLayer(f, file("disk/old.raw", []byte("raw"))), tarLayer(f, opaque("disk"), file("disk/new.qcow2", qcow))},
		{tarLayer(f, file("k/vmlinuz-6", []byte("bz")), symlink("boot", "/k"), symlink("k/vmlinuz", "vmlinuz-6")), tarLayer(f, hardlink("k/initrd.img", "k/vmlinuz-6"))},
		{tarLayer(f, symlink("disk/a", "../../x"), symlink("boot/vmlinuz", "/boot/vmlinuz")), empty},
		{tarLayer(f, file("images/a.raw", []byte("raw"))), tarLayer(f, hardlink("disk/a.raw", "images/a.raw"))},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	base := fuzzDir(f)
	f.Fuzz(func(t *testing.T, l0, l1 []byte) {
		checkExtract(t, base, [][]byte{l0, l1})
	})
}

// FuzzLayout builds layers from a compact script (see scriptLayers) over
// a small vocabulary of names, so symlinks, links, whiteouts and opaque
// directories collide with /disk/ and /boot/ often.
func FuzzLayout(f *testing.F) {
	f.Add([]byte{0, 1, 0, 9, 0})                            // disk/x.qcow2 (valid qcow2)
	f.Add([]byte{0, 1, 0, 9, 1})                            // disk/x.qcow2 (backed)
	f.Add([]byte{0, 2, 1, 2, 3, 0, 2, 1, 3, 3})             // boot/vmlinuz, boot/initrd.img
	f.Add([]byte{2, 1, 0, 0x81, 6, 6, 6, 10, 0, 9})         // symlink disk -> /../../../usr
	f.Add([]byte{0, 2, 0, 4, 3, 7, 4, 2, 0, 4})             // disk/a, new layer, whiteout disk/a
	f.Add([]byte{0, 2, 0, 4, 3, 7, 5, 1, 0, 0, 2, 0, 5, 0}) // opaque disk
	f.Add([]byte{0, 1, 10, 3, 3, 2, 0, 4, 1, 10})           // hard link disk/a -> usr
	base := fuzzDir(f)
	f.Fuzz(func(t *testing.T, script []byte) {
		checkExtract(t, base, scriptLayers(script))
	})
}

// Vocabulary and bodies of FuzzLayout scripts.
var (
	scriptNames  = []string{"disk", "boot", "vmlinuz", "initrd.img", "a", "b", "..", ".", "", "x.qcow2", "usr", "dev"}
	scriptBodies = [][]byte{
		qcow2ImageBits(9, nil),
		qcow2ImageBits(9, func(b []byte) { be64(b, 8, 0x100); be32(b, 16, 4); copy(b[0x100:], "/etc") }),
		qcow2ImageBits(9, func(b []byte) { putExt(b, 112, extDataFile, []byte("/dev/sda")) }),
		[]byte("raw"),
		nil,
	}
)

// scriptLayers decodes a script: records of an op byte (op%8: file, dir,
// symlink, hard link, whiteout, opaque, device, next layer), a name
// (count byte, then that many vocabulary indexes; a count byte with the
// top bit set starts with "/"), and for files a body index, for links a
// target name.
func scriptLayers(script []byte) [][]byte {
	next := func() (byte, bool) {
		if len(script) == 0 {
			return 0, false
		}
		b := script[0]
		script = script[1:]
		return b, true
	}
	name := func() (string, bool) {
		n, ok := next()
		if !ok {
			return "", false
		}
		var parts []string
		for range n % 4 {
			i, ok := next()
			if !ok {
				return "", false
			}
			parts = append(parts, scriptNames[int(i)%len(scriptNames)])
		}
		p := strings.Join(parts, "/")
		if n&0x80 != 0 {
			p = "/" + p
		}
		return p, true
	}
	var layers [][]byte
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	flush := func() {
		tw.Close()
		layers = append(layers, bytes.Clone(buf.Bytes()))
		buf.Reset()
		tw = tar.NewWriter(&buf)
	}
	for len(layers) < 4 {
		op, ok := next()
		if !ok {
			break
		}
		if op%8 == 7 {
			flush()
			continue
		}
		n, ok := name()
		if !ok {
			break
		}
		hdr := &tar.Header{Name: n, Mode: 0o644}
		var body []byte
		switch op % 8 {
		case 0:
			i, _ := next()
			body = scriptBodies[int(i)%len(scriptBodies)]
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(body))
		case 1:
			hdr.Typeflag = tar.TypeDir
		case 2, 3:
			hdr.Typeflag = tar.TypeSymlink
			if op%8 == 3 {
				hdr.Typeflag = tar.TypeLink
			}
			if hdr.Linkname, ok = name(); !ok {
				break
			}
		case 4:
			dir, base := path.Split(n)
			hdr.Name, hdr.Typeflag = dir+whiteoutPrefix+base, tar.TypeReg
		case 5:
			hdr.Name, hdr.Typeflag = path.Join(n, whiteoutOpaque), tar.TypeReg
		case 6:
			hdr.Typeflag = tar.TypeBlock
		}
		if tw.WriteHeader(hdr) == nil {
			tw.Write(body)
		}
	}
	flush()
	return layers
}

func fuzzDir(f *testing.F) string {
	base, err := os.MkdirTemp("", "fuzz-vmimage-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// checkExtract runs extract over layers and holds it to its promises: no
// panic, every rejection an invalid argument, and what it accepts exactly
// the files it reports, with no qcow2 naming another file.
func checkExtract(t *testing.T, base string, layers [][]byte) {
	dir, err := os.MkdirTemp(base, "")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	got, err := extract(context.Background(), len(layers), memLayers(layers), dir, extractOpts{maxDisk: 1 << 20, maxBoot: 1 << 20, noSync: true})
	if err != nil {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("rejection is not an invalid argument: %v", err)
		}
		return
	}
	want := map[string]bool{}
	for _, name := range []string{got.Disk, got.Kernel, got.Initrd} {
		if name != "" {
			want[name] = true
		}
	}
	if got.Disk == "" && got.Kernel == "" {
		t.Fatal("accepted an image with neither disk nor kernel")
	}
	if got.Initrd != "" && got.Kernel == "" {
		t.Fatal("accepted an initrd without a kernel")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Fatalf("wrote %d files, reported %+v", len(entries), got)
	}
	for _, e := range entries {
		if !want[e.Name()] || !e.Type().IsRegular() {
			t.Fatalf("wrote %s (%v), reported %+v", e.Name(), e.Type(), got)
		}
	}
	if got.Disk != "" {
		b, err := os.ReadFile(filepath.Join(dir, got.Disk))
		if err != nil {
			t.Fatal(err)
		}
		if namesOtherFile(b) {
			t.Fatal("accepted a qcow2 disk that names a backing or data file")
		}
		if (got.DiskFormat == FormatQcow2) != bytes.HasPrefix(b, qcow2Magic) {
			t.Fatalf("format %q for a disk starting %q", got.DiskFormat, b[:min(4, len(b))])
		}
	}
}
