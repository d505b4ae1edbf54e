package saveimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// The layout of libvirt 9.0's virQEMUSaveHeader (qemu_saveimage.h): 16
// bytes of magic, then 19 host-endian uint32 (version, data_len,
// was_running, compressed, cookieOffset, 14 unused), 92 bytes in all.
const (
	headerSize   = 92
	magicSave    = "LibvirtQemudSave"
	magicPartial = "LibvirtQemudPart" // libvirt's mark until qemu has written the whole stream
	saveVersion  = 2
)

// streamAlign is where a clone's stream starts: the header, XML and cookie
// are padded to a 4 KiB boundary. libvirt needs no padding from a reader's
// side (its own writer adds 64 KiB so that the XML can later be edited in
// place, which a FIFO never is). The few bytes keep the stream
// block-aligned should a clone's image ever be captured to a file, the
// one layout a reflink (FICLONERANGE) can then share with the template
// instead of copying it.
const streamAlign = 4096

// Errors a caller can tell apart with errors.Is.
var (
	ErrNotSaveImage = errors.New("not a libvirt save image")
	ErrIncomplete   = errors.New("save image is incomplete (magic " + magicPartial + ": qemu never finished writing it)")
	ErrVersion      = errors.New("unsupported save image version")
	ErrTruncated    = errors.New("save image is truncated")
	ErrCompressed   = errors.New("save image stream is compressed")
)

// compressionNames are libvirt's virQEMUSaveFormat values, for messages.
var compressionNames = []string{"raw", "gzip", "bzip2", "xz", "lzop"}

// header holds the words of virQEMUSaveHeader that libvirt 9.0 reads; it
// writes the 14 unused ones as zero and never looks at them.
type header struct {
	magic        string
	version      uint32
	dataLen      uint32
	wasRunning   uint32
	compressed   uint32
	cookieOffset uint32
}

func (h header) marshal() []byte {
	b := make([]byte, headerSize)
	copy(b, h.magic)
	for i, v := range []uint32{h.version, h.dataLen, h.wasRunning, h.compressed, h.cookieOffset} {
		binary.NativeEndian.PutUint32(b[16+4*i:], v)
	}
	return b
}

// decodeHeader checks a header as qemuSaveImageOpen does. Like libvirt it
// byte-swaps the words when the version is above its own, which reads an
// image written on a host of the other endianness.
func decodeHeader(b []byte) (header, error) {
	h := header{magic: string(b[:16])}
	words := make([]uint32, 5)
	for i := range words {
		words[i] = binary.NativeEndian.Uint32(b[16+4*i:])
	}
	switch {
	case h.magic == magicPartial:
		return h, ErrIncomplete
	case h.magic != magicSave:
		return h, fmt.Errorf("%w: magic %q, want %q", ErrNotSaveImage, h.magic, magicSave)
	}
	raw := words[0]
	if raw > saveVersion {
		for i := range words {
			words[i] = bits.ReverseBytes32(words[i])
		}
	}
	h.version, h.dataLen, h.wasRunning, h.compressed, h.cookieOffset = words[0], words[1], words[2], words[3], words[4]
	if h.version != saveVersion {
		return h, versionError(raw)
	}
	if h.dataLen == 0 {
		return h, fmt.Errorf("%w: data_len is 0, so there is no domain XML", ErrNotSaveImage)
	}
	if h.cookieOffset > h.dataLen {
		return h, fmt.Errorf("%w: cookieOffset %d beyond data_len %d", ErrNotSaveImage, h.cookieOffset, h.dataLen)
	}
	return h, nil
}

// cloneHeader builds everything libvirt reads before the stream for a
// clone: a version 2 header of a running, uncompressed image, the XML and
// the cookie, each NUL-terminated as libvirt's writer leaves them, and
// zero padding up to streamAlign. cookieOffset stays 0 without a cookie,
// which tells libvirt the XML fills data_len.
func cloneHeader(xml, cookie string) ([]byte, error) {
	if xml == "" {
		return nil, errors.New("clone header: empty domain XML")
	}
	if strings.IndexByte(xml, 0) >= 0 || strings.IndexByte(cookie, 0) >= 0 {
		return nil, errors.New("clone header: NUL byte inside the domain XML or cookie would cut it short")
	}
	xmlLen := len(xml) + 1
	cookieLen := 0
	if cookie != "" {
		cookieLen = len(cookie) + 1
	}
	total := alignUp(headerSize+xmlLen+cookieLen, streamAlign)
	if total-headerSize > math.MaxUint32 {
		return nil, fmt.Errorf("clone header: %d bytes of XML and cookie overflow data_len", xmlLen+cookieLen)
	}
	h := header{magic: magicSave, version: saveVersion, dataLen: uint32(total - headerSize), wasRunning: 1}
	if cookie != "" {
		h.cookieOffset = uint32(xmlLen)
	}
	buf := make([]byte, total)
	copy(buf, h.marshal())
	copy(buf[headerSize:], xml)
	copy(buf[headerSize+xmlLen:], cookie)
	return buf, nil
}

// versionError says what was tried, so that an image from a newer libvirt
// (or a foreign host) is recognizable from the message alone.
func versionError(raw uint32) error {
	if raw > saveVersion {
		return fmt.Errorf("%w: version %d, or %d byte-swapped (libvirt byte-swaps a version above %d to read an image from a host of the other endianness); crimux reads version %d only",
			ErrVersion, raw, bits.ReverseBytes32(raw), saveVersion, saveVersion)
	}
	return fmt.Errorf("%w: version %d; crimux reads version %d only, which libvirt 9.0 writes", ErrVersion, raw, saveVersion)
}

func alignUp(n, to int) int {
	return (n + to - 1) / to * to
}

func compressionName(c uint32) string {
	if int(c) < len(compressionNames) {
		return compressionNames[c]
	}
	return fmt.Sprintf("unknown format %d", c)
}
