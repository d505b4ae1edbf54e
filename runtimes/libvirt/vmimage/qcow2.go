package vmimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Disk formats. The format is always passed to libvirt explicitly: qemu
// never probes an image's format.
const (
	FormatQcow2 = "qcow2"
	FormatRaw   = "raw"
)

var qcow2Magic = []byte("QFI\xfb")

// qcow2 facts (qemu's docs/interop/qcow2.txt).
const (
	qcow2SizeOffset    = 24 // the virtual size, a big-endian uint64
	qcow2HeaderV2      = 72
	qcow2HeaderV3      = 104
	qcow2MinCluster    = 9
	qcow2MaxCluster    = 21 // qemu's implementation limit, 2 MiB
	qcow2MaxRefOrder   = 6
	qcow2MaxSnapshots  = 65536
	qcow2MaxBackingLen = 1023

	incompatDirty      = 1 << 0
	incompatCorrupt    = 1 << 1
	incompatDataFile   = 1 << 2
	incompatCompress   = 1 << 3
	incompatExtendedL2 = 1 << 4
	incompatKnown      = incompatDirty | incompatCorrupt | incompatDataFile | incompatCompress | incompatExtendedL2

	extEnd      = 0x00000000
	extDataFile = 0x44415441
)

// otherFormats are magic numbers of formats qemu reads but crimux does
// not take: better a clear error than a VM booting a VMDK as raw bytes.
var otherFormats = []struct {
	offset int64
	magic  []byte
	name   string
}{
	{0, []byte("QED\x00"), "qed"},
	{0, []byte("KDMV"), "vmdk"},
	{0, []byte("# Disk DescriptorFile"), "vmdk"},
	{0, []byte("vhdxfile"), "vhdx"},
	{0, []byte("conectix"), "vpc"},
	{0x40, []byte{0x7f, 0x10, 0xda, 0xbe}, "vdi"},
}

// diskInfo detects a disk's format from its content and the size of the
// disk the guest sees: qcow2 by its magic (its header's virtual size),
// else raw (the file's size). A qcow2 must name no other file (backing
// file, external data file) and pass checkQcow2; the reason it fails is
// the error.
func diskInfo(r io.ReaderAt, size int64) (format string, virtualSize int64, err error) {
	format, err = diskFormat(r, size)
	if err != nil || format != FormatQcow2 {
		return format, size, err
	}
	virtualSize, err = qcow2VirtualSize(r)
	return format, virtualSize, err
}

// qcow2VirtualSize reads the size of the disk a qcow2 gives the guest:
// what its overlay may grow to, whatever the file's own size (a few MiB
// of qcow2 can declare a PiB).
func qcow2VirtualSize(r io.ReaderAt) (int64, error) {
	var b [8]byte
	if _, err := r.ReadAt(b[:], qcow2SizeOffset); err != nil {
		return 0, fmt.Errorf("qcow2 header: read the virtual size: %w", err)
	}
	v := binary.BigEndian.Uint64(b[:])
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("qcow2 virtual size %d does not fit a signed 64-bit size", v)
	}
	return int64(v), nil
}

// diskFormat detects a disk's format from its content: qcow2 by its magic,
// else raw. A qcow2 must name no other file (backing file, external data
// file) and pass checkQcow2; the reason it fails is the error.
func diskFormat(r io.ReaderAt, size int64) (string, error) {
	head := make([]byte, 0x44)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	if bytes.HasPrefix(head, qcow2Magic) {
		return FormatQcow2, checkQcow2(r, size)
	}
	for _, f := range otherFormats {
		if int64(len(head)) >= f.offset+int64(len(f.magic)) && bytes.Equal(head[f.offset:f.offset+int64(len(f.magic))], f.magic) {
			return "", fmt.Errorf("is a %s image; convert it to qcow2 or raw", f.name)
		}
	}
	return FormatRaw, nil
}

// qcow2Header is the part of the header the checks read.
type qcow2Header struct {
	version, backingSize, clusterBits, cryptMethod, l1Size uint32
	backingOffset, l1Offset, refcountOffset                uint64
	refcountClusters, snapshots, refcountOrder, headerLen  uint32
	incompatible                                           uint64
}

func parseQcow2Header(b []byte) qcow2Header {
	be := binary.BigEndian
	h := qcow2Header{
		version:          be.Uint32(b[4:]),
		backingOffset:    be.Uint64(b[8:]),
		backingSize:      be.Uint32(b[16:]),
		clusterBits:      be.Uint32(b[20:]),
		cryptMethod:      be.Uint32(b[32:]),
		l1Size:           be.Uint32(b[36:]),
		l1Offset:         be.Uint64(b[40:]),
		refcountOffset:   be.Uint64(b[48:]),
		refcountClusters: be.Uint32(b[56:]),
		snapshots:        be.Uint32(b[60:]),
		refcountOrder:    4,
		headerLen:        qcow2HeaderV2,
	}
	if h.version >= 3 && len(b) >= qcow2HeaderV3 {
		h.incompatible = be.Uint64(b[72:])
		h.refcountOrder = be.Uint32(b[96:])
		h.headerLen = be.Uint32(b[100:])
	}
	return h
}

// checkQcow2 rejects a qcow2 header that points outside the file or that
// qemu would read in ways we cannot vouch for. It runs before qemu ever
// opens the file: a backing file could name a host block device.
func checkQcow2(r io.ReaderAt, size int64) error {
	if size < qcow2HeaderV2 {
		return fmt.Errorf("qcow2 header truncated: the file is %d bytes", size)
	}
	b := make([]byte, qcow2HeaderV3)
	n, err := r.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if n < qcow2HeaderV2 {
		return fmt.Errorf("qcow2 header truncated: read %d bytes", n)
	}
	b = b[:n]
	h := parseQcow2Header(b)
	if h.version != 2 && h.version != 3 {
		return fmt.Errorf("qcow2 version %d, want 2 or 3", h.version)
	}
	if h.backingOffset != 0 {
		return fmt.Errorf("qcow2 names a backing file %s", qcow2String(r, size, h.backingOffset, h.backingSize))
	}
	if h.version == 3 && n < qcow2HeaderV3 {
		return fmt.Errorf("qcow2 v3 header truncated: the file is %d bytes", size)
	}
	if h.clusterBits < qcow2MinCluster || h.clusterBits > qcow2MaxCluster {
		return fmt.Errorf("qcow2 cluster_bits %d, want %d to %d", h.clusterBits, qcow2MinCluster, qcow2MaxCluster)
	}
	cluster := int64(1) << h.clusterBits
	if h.version == 3 && (h.headerLen < qcow2HeaderV3 || h.headerLen%8 != 0 || int64(h.headerLen) > cluster) {
		return fmt.Errorf("qcow2 header_length %d does not fit (at least %d, a multiple of 8, at most the cluster size %d)", h.headerLen, qcow2HeaderV3, cluster)
	}
	if int64(h.headerLen) > size {
		return fmt.Errorf("qcow2 header_length %d is beyond the end of the %d-byte file", h.headerLen, size)
	}
	if err := checkQcow2Extensions(r, size, int64(h.headerLen), min(cluster, size)); err != nil {
		return err
	}
	if err := checkQcow2Features(h); err != nil {
		return err
	}
	return checkQcow2Tables(h, cluster, size)
}

// checkQcow2Extensions walks the header extensions, which lie between the
// header and the end of the first cluster, and rejects an external data
// file name whether or not the feature bit is set (qemu ignores the name
// without the bit; an image carrying one is not one we want).
func checkQcow2Extensions(r io.ReaderAt, size, off, end int64) error {
	var ext [8]byte
	for off < end {
		if end-off < 8 {
			return fmt.Errorf("qcow2 header extension at offset %d overruns the first cluster", off)
		}
		if _, err := r.ReadAt(ext[:], off); err != nil {
			return fmt.Errorf("qcow2 header extension at offset %d: %w", off, err)
		}
		typ := binary.BigEndian.Uint32(ext[0:])
		length := int64(binary.BigEndian.Uint32(ext[4:]))
		if typ == extEnd {
			return nil
		}
		if length > end-off-8 {
			return fmt.Errorf("qcow2 header extension %#x at offset %d overruns the first cluster", typ, off)
		}
		if typ == extDataFile {
			return fmt.Errorf("qcow2 names an external data file %s", qcow2String(r, size, uint64(off+8), uint32(length)))
		}
		off += 8 + (length+7)&^7
	}
	// qemu stops at the cluster's end too, but every writer ends the list
	// with a marker: a list without one is damaged or crafted.
	return fmt.Errorf("qcow2 header extensions have no end marker within the first %d bytes", end)
}

func checkQcow2Features(h qcow2Header) error {
	switch {
	case h.incompatible&incompatDataFile != 0:
		return errors.New("qcow2 uses an external data file (incompatible feature bit 2)")
	case h.incompatible&^incompatKnown != 0:
		return fmt.Errorf("qcow2 has unknown incompatible features %#x", h.incompatible&^incompatKnown)
	case h.incompatible&incompatCorrupt != 0:
		return errors.New("qcow2 is marked corrupt")
	case h.cryptMethod != 0:
		return fmt.Errorf("qcow2 is encrypted (crypt_method %d); encrypted images are not supported", h.cryptMethod)
	case h.refcountOrder > qcow2MaxRefOrder:
		return fmt.Errorf("qcow2 refcount_order %d, at most %d", h.refcountOrder, qcow2MaxRefOrder)
	}
	return nil
}

// checkQcow2Tables checks that the tables qemu reads first lie inside the
// file: a header whose sizes do not fit is corrupt or hostile.
func checkQcow2Tables(h qcow2Header, cluster, size int64) error {
	if h.l1Offset%uint64(cluster) != 0 || h.refcountOffset%uint64(cluster) != 0 {
		return errors.New("qcow2 L1 or refcount table is not cluster aligned")
	}
	if h.l1Size > 0 && !fits(h.l1Offset, uint64(h.l1Size)*8, size) {
		return fmt.Errorf("qcow2 L1 table (%d entries at offset %d) is beyond the end of the %d-byte file", h.l1Size, h.l1Offset, size)
	}
	if h.refcountClusters == 0 {
		return errors.New("qcow2 has no refcount table")
	}
	if !fits(h.refcountOffset, uint64(h.refcountClusters)*uint64(cluster), size) {
		return fmt.Errorf("qcow2 refcount table (%d clusters at offset %d) is beyond the end of the %d-byte file", h.refcountClusters, h.refcountOffset, size)
	}
	if h.snapshots > qcow2MaxSnapshots {
		return fmt.Errorf("qcow2 has %d snapshots, at most %d", h.snapshots, qcow2MaxSnapshots)
	}
	return nil
}

// fits reports whether [off, off+n) lies inside a file of size bytes.
func fits(off, n uint64, size int64) bool {
	return off <= uint64(size) && n <= uint64(size)-off
}

// qcow2String reads a name stored in the file for an error message,
// quoted; a name that cannot be read is described by its offset.
func qcow2String(r io.ReaderAt, size int64, off uint64, n uint32) string {
	if n == 0 || n > qcow2MaxBackingLen || !fits(off, uint64(n), size) {
		return fmt.Sprintf("(%d bytes at offset %d)", n, off)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, int64(off)); err != nil {
		return fmt.Sprintf("(%d bytes at offset %d)", n, off)
	}
	return fmt.Sprintf("%q", b)
}

// CheckDisk reads a disk that is not an image's (a volume holding a VM's
// root disk) as strictly as an image's: its format from its content (a
// qcow2 must name no backing file nor external data file, and its tables
// must lie within size), and the size of the disk the guest sees.
func CheckDisk(r io.ReaderAt, size int64) (format string, virtualSize int64, err error) {
	return diskInfo(r, size)
}
