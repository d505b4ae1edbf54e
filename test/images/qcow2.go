package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// qcow2 v3 header fields and extensions this file touches (see qemu's
// docs/interop/qcow2.txt).
const (
	qcow2Magic            = 0x514649fb
	qcow2IncompatDataFile = 1 << 2
	qcow2ExtEnd           = 0x00000000
	qcow2ExtDataFile      = 0x44415441
)

// withExternalDataFile returns a copy of img, a qcow2 v3 image that uses
// no data file, whose header names the external data file name: the
// "external data file" header extension, placed first, and incompatible
// feature bit 2. qemu-img cannot make such an image without opening (and
// creating) the data file, so the test bed writes it itself.
func withExternalDataFile(img []byte, name string) ([]byte, error) {
	be := binary.BigEndian
	if len(img) < 104 || be.Uint32(img) != qcow2Magic || be.Uint32(img[4:]) != 3 {
		return nil, errors.New("not a qcow2 version 3 image")
	}
	clusterSize := 1 << be.Uint32(img[20:])
	if be.Uint64(img[8:]) != 0 {
		return nil, errors.New("image already has a backing file")
	}
	if be.Uint64(img[72:])&qcow2IncompatDataFile != 0 {
		return nil, errors.New("image already has an external data file")
	}
	hdrLen := int(be.Uint32(img[100:]))

	// The existing extensions, up to and including the end marker.
	off := hdrLen
	for {
		if off+8 > clusterSize || off+8 > len(img) {
			return nil, errors.New("qcow2 header extensions run past the first cluster")
		}
		typ, n := be.Uint32(img[off:]), int(be.Uint32(img[off+4:]))
		off += 8 + (n+7)&^7
		if typ == qcow2ExtEnd {
			break
		}
	}

	var ext bytes.Buffer
	binary.Write(&ext, be, uint32(qcow2ExtDataFile))
	binary.Write(&ext, be, uint32(len(name)))
	ext.WriteString(name)
	for ext.Len()%8 != 0 {
		ext.WriteByte(0)
	}
	if off+ext.Len() > clusterSize {
		return nil, fmt.Errorf("no room for a %d-byte extension in the first cluster", ext.Len())
	}
	// The rest of the first cluster is unused (zero) in an image without a
	// backing file: shift the extensions and insert ours first.
	for _, b := range img[off : off+ext.Len()] {
		if b != 0 {
			return nil, errors.New("the first cluster has data after the header extensions")
		}
	}
	out := append([]byte(nil), img...)
	copy(out[hdrLen+ext.Len():], img[hdrLen:off])
	copy(out[hdrLen:], ext.Bytes())
	be.PutUint64(out[72:], be.Uint64(img[72:])|qcow2IncompatDataFile)
	return out, nil
}
