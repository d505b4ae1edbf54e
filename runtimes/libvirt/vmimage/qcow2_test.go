package vmimage

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/testbed"
)

func be32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func be64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

func TestDiskFormatHandMade(t *testing.T) {
	v2 := qcow2Image(func(b []byte) {
		be32(b, 4, 2)
		clear(b[72:112])
	})
	tests := []struct {
		name    string
		file    []byte
		format  string
		wantErr string
	}{
		{"valid v3", qcow2Image(nil), FormatQcow2, ""},
		{"valid v2", v2, FormatQcow2, ""},
		{"raw", []byte("\xeb\x63\x90 boot sector"), FormatRaw, ""},
		{"raw shorter than a magic", []byte("QF"), FormatRaw, ""},
		{"backing file", qcow2Image(func(b []byte) {
			be64(b, 8, 0x1000)
			be32(b, 16, 8)
			copy(b[0x1000:], "/dev/sda")
		}), "", `qcow2 names a backing file "/dev/sda"`},
		{"backing file out of the file", qcow2Image(func(b []byte) {
			be64(b, 8, 1<<40)
			be32(b, 16, 8)
		}), "", "qcow2 names a backing file (8 bytes at offset 1099511627776)"},
		{"backing file in a v2 image", func() []byte {
			b := bytes.Clone(v2)
			be64(b, 8, 0x1000)
			be32(b, 16, 4)
			copy(b[0x1000:], "/etc")
			return b
		}(), "", `qcow2 names a backing file "/etc"`},
		{"data file bit", qcow2Image(func(b []byte) { be64(b, 72, incompatDataFile) }),
			"", "qcow2 uses an external data file (incompatible feature bit 2)"},
		{"data file extension with the bit", qcow2Image(func(b []byte) {
			be64(b, 72, incompatDataFile)
			putExt(b, 112, extDataFile, []byte("/dev/nvme0n1"))
		}), "", `qcow2 names an external data file "/dev/nvme0n1"`},
		{"data file extension without the bit, after another", qcow2Image(func(b []byte) {
			off := putExt(b, 112, 0x6803f857, make([]byte, 48))
			putExt(b, off, extDataFile, []byte("x.raw"))
		}), "", `qcow2 names an external data file "x.raw"`},
		{"unknown incompatible feature", qcow2Image(func(b []byte) { be64(b, 72, 1<<5) }),
			"", "qcow2 has unknown incompatible features 0x20"},
		{"known incompatible features", qcow2Image(func(b []byte) {
			be64(b, 72, incompatDirty|incompatCompress|incompatExtendedL2)
			b[104] = 1 // zstd
		}), FormatQcow2, ""},
		{"corrupt", qcow2Image(func(b []byte) { be64(b, 72, incompatCorrupt) }), "", "qcow2 is marked corrupt"},
		{"encrypted", qcow2Image(func(b []byte) { be32(b, 32, 2) }), "", "qcow2 is encrypted (crypt_method 2)"},
		{"version 1", qcow2Image(func(b []byte) { be32(b, 4, 1) }), "", "qcow2 version 1, want 2 or 3"},
		{"version 4", qcow2Image(func(b []byte) { be32(b, 4, 4) }), "", "qcow2 version 4, want 2 or 3"},
		{"header too short", qcow2Image(nil)[:71], "", "qcow2 header truncated: the file is 71 bytes"},
		{"v3 header cut", qcow2Image(nil)[:100], "", "qcow2 v3 header truncated"},
		{"header_length below 104", qcow2Image(func(b []byte) { be32(b, 100, 96) }), "", "qcow2 header_length 96 does not fit"},
		{"header_length not a multiple of 8", qcow2Image(func(b []byte) { be32(b, 100, 105) }), "", "qcow2 header_length 105 does not fit"},
		{"header_length above the cluster", qcow2Image(func(b []byte) { be32(b, 100, 1<<17) }), "", "qcow2 header_length 131072 does not fit"},
		{"cluster_bits too small", qcow2Image(func(b []byte) { be32(b, 20, 8) }), "", "qcow2 cluster_bits 8, want 9 to 21"},
		{"cluster_bits too large", qcow2Image(func(b []byte) { be32(b, 20, 22) }), "", "qcow2 cluster_bits 22, want 9 to 21"},
		{"refcount_order too large", qcow2Image(func(b []byte) { be32(b, 96, 7) }), "", "qcow2 refcount_order 7, at most 6"},
		{"extension overruns the cluster", qcow2Image(func(b []byte) {
			be32(b, 112, 0xe2792aca)
			be32(b, 116, 1<<16)
		}), "", "qcow2 header extension 0xe2792aca at offset 112 overruns the first cluster"},
		{"L1 table beyond the end", qcow2Image(func(b []byte) { be32(b, 36, 1<<20) }), "", "qcow2 L1 table (1048576 entries at offset 196608) is beyond the end"},
		{"L1 table offset overflows", qcow2Image(func(b []byte) { be64(b, 40, 0xffffffffffff0000) }), "", "qcow2 L1 table"},
		{"L1 table unaligned", qcow2Image(func(b []byte) { be64(b, 40, 3<<16+8) }), "", "not cluster aligned"},
		{"no refcount table", qcow2Image(func(b []byte) { be32(b, 56, 0) }), "", "qcow2 has no refcount table"},
		{"refcount table beyond the end", qcow2Image(func(b []byte) { be32(b, 56, 1<<30) }), "", "qcow2 refcount table"},
		{"too many snapshots", qcow2Image(func(b []byte) { be32(b, 60, 1<<20) }), "", "qcow2 has 1048576 snapshots"},
		{"vmdk", append([]byte("KDMV"), make([]byte, 508)...), "", "is a vmdk image; convert it to qcow2 or raw"},
		{"vdi", func() []byte { b := make([]byte, 512); copy(b[0x40:], "\x7f\x10\xda\xbe"); return b }(), "", "is a vdi image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			format, err := diskFormat(bytes.NewReader(tt.file), int64(len(tt.file)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if format != tt.format {
				t.Fatalf("format = %q, want %q", format, tt.format)
			}
		})
	}
}

// TestHandMadeQcow2IsReal keeps the test builder honest: qemu-img must
// read the hand-made image as a clean qcow2.
func TestHandMadeQcow2IsReal(t *testing.T) {
	qemuImg := needQemuImg(t)
	p := filepath.Join(t.TempDir(), "hand.qcow2")
	if err := os.WriteFile(p, qcow2Image(nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuImg, "check", "-f", "qcow2", p).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img check: %v\n%s", err, out)
	}
}

func needQemuImg(t *testing.T) string { return testbed.Tool(t, "qemu-img") }

// TestDiskFormatQemuImg checks files made by the real qemu-img.
func TestDiskFormatQemuImg(t *testing.T) {
	qemuImg := needQemuImg(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string // after "create", before the file and size
		format  string
		wantErr string
	}{
		{"plain", []string{"-f", "qcow2"}, FormatQcow2, ""},
		{"compat 0.10 (v2)", []string{"-f", "qcow2", "-o", "compat=0.10"}, FormatQcow2, ""},
		{"zstd, extended L2, lazy refcounts", []string{"-f", "qcow2", "-o", "compression_type=zstd,extended_l2=on,lazy_refcounts=on,cluster_size=2M"}, FormatQcow2, ""},
		{"small clusters", []string{"-f", "qcow2", "-o", "cluster_size=512"}, FormatQcow2, ""},
		{"raw", []string{"-f", "raw"}, FormatRaw, ""},
		{"backing file", []string{"-f", "qcow2", "-b", base, "-F", "raw"}, "", `qcow2 names a backing file "` + base + `"`},
		{"backing file v2", []string{"-f", "qcow2", "-o", "compat=0.10", "-b", base, "-F", "raw"}, "", "qcow2 names a backing file"},
		{"external data file", []string{"-f", "qcow2", "-o", "data_file=" + filepath.Join(dir, "data1.raw")}, "", `qcow2 names an external data file "` + filepath.Join(dir, "data1.raw") + `"`},
		{"raw external data file", []string{"-f", "qcow2", "-o", "data_file=" + filepath.Join(dir, "data2.raw") + ",data_file_raw=on"}, "", "qcow2 names an external data file"},
		{"luks encrypted", []string{"--object", "secret,id=sec0,data=123456", "-f", "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10"}, "", "qcow2 is encrypted (crypt_method 2)"},
		{"vmdk", []string{"-f", "vmdk"}, "", "is a vmdk image"},
		{"vhdx", []string{"-f", "vhdx"}, "", "is a vhdx image"},
		{"vdi", []string{"-f", "vdi"}, "", "is a vdi image"},
		{"qed", []string{"-f", "qed"}, "", "is a qed image"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "img"+string(rune('a'+i)))
			args := append(append([]string{"create", "-q"}, tt.args...), p, "1M")
			if out, err := exec.Command(qemuImg, args...).CombinedOutput(); err != nil {
				t.Skipf("qemu-img %v: %v\n%s", args, err, out) // an option this build lacks
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			format, err := diskFormat(f, fi.Size())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if format != tt.format {
				t.Fatalf("format = %q, want %q", format, tt.format)
			}
		})
	}
}

// TestDiskVirtualSize: the size the guest sees is read from a qcow2's
// header (a few KiB may declare a PiB: the disk bomb) and is a
// raw file's own size; a declared size past int64 is refused.
func TestDiskVirtualSize(t *testing.T) {
	const pib = int64(1) << 50
	for _, tc := range []struct {
		name    string
		disk    []byte
		want    int64
		wantErr string
	}{
		{name: "qcow2 1 MiB", disk: qcow2Image(nil), want: 1 << 20},
		{name: "qcow2 declaring 1 PiB", disk: qcow2Image(func(b []byte) { binary.BigEndian.PutUint64(b[24:], uint64(pib)) }), want: pib},
		{name: "qcow2 past int64", disk: qcow2Image(func(b []byte) { binary.BigEndian.PutUint64(b[24:], 1<<63) }), wantErr: "does not fit"},
		{name: "raw", disk: make([]byte, 3000), want: 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := diskInfo(bytes.NewReader(tc.disk), int64(len(tc.disk)))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("diskInfo: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("diskInfo = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
