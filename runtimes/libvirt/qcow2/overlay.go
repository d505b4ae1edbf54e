// Package qcow2 writes the VM's root disk: an empty qcow2 (version 3)
// image over the image's disk, every cluster read from that backing file
// until the guest writes it. It is what `qemu-img create -f qcow2 -b
// backing -F format` writes, without running qemu-img: a fork and exec of
// a binary that loads a score of shared libraries, about 12 ms of CPU per
// VM, which fifty VM pods created at once paid together before any of
// them could start. The format: qemu's docs/interop/qcow2.txt.
package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// The layout qemu-img gives a new image: the header in cluster 0, the
// refcount table in cluster 1, its one refcount block in cluster 2, the
// L1 table from cluster 3 on. No L2 table exists: every guest cluster is
// unallocated and reads from the backing file.
const (
	clusterBits      = 16
	clusterSize      = 1 << clusterBits
	refcountOrder    = 4 // 16-bit refcounts
	headerLength     = 104
	refTableCluster  = 1
	refBlockCluster  = 2
	l1Cluster        = 3
	l2Entries        = clusterSize / 8
	bytesPerL1Entry  = clusterSize * l2Entries // 512 MiB of guest disk per L2 table
	extBackingFormat = 0xe2792aca
	// maxBackingName is qemu's limit on the backing file's name.
	maxBackingName = 1023
	// maxVirtualSize keeps the refcount block (32,768 clusters) enough for
	// the L1 table: far beyond any VM disk (crimux caps them at 64 GiB by
	// default).
	maxVirtualSize = 1 << 50
)

var magic = [4]byte{'Q', 'F', 'I', 0xfb}

// CreateOverlay writes at path a new qcow2 image of the backing file's
// virtual size over backing, a disk of format backingFormat ("qcow2" or
// "raw"). path must not exist; the file is made with mode perm.
func CreateOverlay(path, backing, backingFormat string, virtualSize int64, perm os.FileMode) (err error) {
	img, err := overlay(backing, backingFormat, virtualSize)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	for _, p := range img.parts {
		if _, err := f.WriteAt(p.data, p.off); err != nil {
			return fmt.Errorf("write qcow2 overlay %s: %w", path, err)
		}
	}
	// The L1 table's zeros are a hole, as the file's end.
	return f.Truncate(img.size)
}

// image is an overlay's bytes: the parts that are not zeros, and the
// file's size.
type image struct {
	parts []part
	size  int64
}

type part struct {
	off  int64
	data []byte
}

// overlay lays out an overlay of virtualSize bytes over backing.
func overlay(backing, backingFormat string, virtualSize int64) (image, error) {
	switch {
	case backingFormat != "qcow2" && backingFormat != "raw":
		return image{}, fmt.Errorf("qcow2 overlay: backing format %q is not qcow2 or raw", backingFormat)
	case backing == "" || len(backing) > maxBackingName:
		return image{}, fmt.Errorf("qcow2 overlay: backing file name of %d bytes (1 to %d)", len(backing), maxBackingName)
	case virtualSize <= 0 || virtualSize > maxVirtualSize:
		return image{}, errors.New("qcow2 overlay: virtual size out of range")
	}
	size := (virtualSize + 511) &^ 511 // whole sectors, as qemu-img rounds
	l1Entries := (size + bytesPerL1Entry - 1) / bytesPerL1Entry
	l1Clusters := (l1Entries*8 + clusterSize - 1) / clusterSize
	clusters := l1Cluster + l1Clusters

	header := make([]byte, 0, clusterSize)
	header = binary.BigEndian.AppendUint32(append(header, magic[:]...), 3) // version
	exts := extensions(backingFormat)
	backingOff := uint64(headerLength + len(exts))
	header = binary.BigEndian.AppendUint64(header, backingOff)
	header = binary.BigEndian.AppendUint32(header, uint32(len(backing)))
	header = binary.BigEndian.AppendUint32(header, clusterBits)
	header = binary.BigEndian.AppendUint64(header, uint64(size))
	header = binary.BigEndian.AppendUint32(header, 0) // no encryption
	header = binary.BigEndian.AppendUint32(header, uint32(l1Entries))
	header = binary.BigEndian.AppendUint64(header, l1Cluster*clusterSize)
	header = binary.BigEndian.AppendUint64(header, refTableCluster*clusterSize)
	header = binary.BigEndian.AppendUint32(header, 1) // refcount table clusters
	header = binary.BigEndian.AppendUint32(header, 0) // snapshots
	header = binary.BigEndian.AppendUint64(header, 0) // snapshots' offset
	header = binary.BigEndian.AppendUint64(header, 0) // incompatible features
	header = binary.BigEndian.AppendUint64(header, 0) // compatible features
	header = binary.BigEndian.AppendUint64(header, 0) // autoclear features
	header = binary.BigEndian.AppendUint32(header, refcountOrder)
	header = binary.BigEndian.AppendUint32(header, headerLength)
	header = append(append(header, exts...), backing...)

	refTable := binary.BigEndian.AppendUint64(nil, refBlockCluster*clusterSize)
	refBlock := make([]byte, 2*clusters) // every cluster of the file is used once
	for i := range clusters {
		binary.BigEndian.PutUint16(refBlock[2*i:], 1)
	}
	return image{
		parts: []part{{0, header}, {refTableCluster * clusterSize, refTable}, {refBlockCluster * clusterSize, refBlock}},
		size:  clusters * clusterSize,
	}, nil
}

// extensions are the header extensions: the backing file's format, then
// the end mark. Each is padded to 8 bytes.
func extensions(backingFormat string) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, extBackingFormat)
	b = binary.BigEndian.AppendUint32(b, uint32(len(backingFormat)))
	b = append(b, backingFormat...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return append(b, make([]byte, 8)...) // type 0, length 0: the end
}
