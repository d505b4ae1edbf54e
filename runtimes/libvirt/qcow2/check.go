package qcow2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A VM's root disk is its qemu's to write, header included: a compromised
// qemu can rewrite it to name any host file (a root-only file, a block
// device) as its backing file, or as an external data file, and exit.
// Whatever then reads the chain from the header (libvirt probing it at the
// next start, qemu-img) opens that file as root and may hand it to qemu.
// crimux names the whole chain in the domain XML, so libvirt never reads
// it from the header, and checks the header with CheckOverlay before every
// start, restore or resume: a disk that says anything else is refused.

// Backing is the one backing file an overlay must name.
type Backing struct {
	Path   string
	Format string
}

// ErrHeaderChanged: the overlay's header is not one crimux wrote (or qemu
// keeps as it found it).
var ErrHeaderChanged = errors.New("root disk header changed")

const (
	extDataFile      = 0x44415441
	incompatDataFile = 1 << 2
	maxHeaderRead    = 2 * clusterSize // the header and its extensions fit the first cluster
)

// CheckOverlay verifies that path is a qcow2 whose backing file is exactly
// want (name and format) and that names no external data file. The file
// is opened without following a link and must be a regular file; only its
// first clusters are read.
func CheckOverlay(path string, want Backing) error {
	got, err := Inspect(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s: backing file %q (format %q); want %q (%s): %w", path, got.Path, got.Format, want.Path, want.Format, ErrHeaderChanged)
	}
	return nil
}

// Inspect reads the backing file a qcow2 at path names (an empty Backing
// for none); a qcow2 naming an external data file, or a file that is not
// a qcow2, is ErrHeaderChanged.
func Inspect(path string) (Backing, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Backing{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Backing{}, err
	}
	if !st.Mode().IsRegular() {
		return Backing{}, fmt.Errorf("%s: not a regular file (%v): %w", path, st.Mode().Type(), ErrHeaderChanged)
	}
	buf := make([]byte, maxHeaderRead)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Backing{}, fmt.Errorf("read %s: %w", path, err)
	}
	h, err := parseHeader(buf[:n])
	if err != nil {
		return Backing{}, fmt.Errorf("%s: %v: %w", path, err, ErrHeaderChanged)
	}
	if h.dataFile {
		return Backing{}, fmt.Errorf("%s: %s: %w", path, h, ErrHeaderChanged)
	}
	return Backing{Path: h.backing, Format: h.backingFormat}, nil
}

// header is what CheckOverlay reads of a qcow2 header.
type header struct {
	backing, backingFormat string
	dataFile               bool
}

func (h header) String() string {
	s := fmt.Sprintf("backing file %q (format %q)", h.backing, h.backingFormat)
	if h.dataFile {
		s += ", an external data file"
	}
	return s
}

// parseHeader reads a qcow2 header (version 2 or 3) and its extensions
// from b, the file's first bytes.
func parseHeader(b []byte) (header, error) {
	var h header
	be := binary.BigEndian
	if len(b) < 72 || !bytes.Equal(b[:4], magic[:]) {
		return h, errors.New("not a qcow2 image")
	}
	version := be.Uint32(b[4:])
	extOff := uint64(72)
	switch version {
	case 2:
	case 3:
		if len(b) < headerLength {
			return h, errors.New("short qcow2 v3 header")
		}
		h.dataFile = be.Uint64(b[72:])&incompatDataFile != 0
		extOff = uint64(be.Uint32(b[100:]))
	default:
		return h, fmt.Errorf("qcow2 version %d", version)
	}
	boff, blen := be.Uint64(b[8:]), uint64(be.Uint32(b[16:]))
	if blen > maxBackingName || boff+blen > uint64(len(b)) {
		return h, fmt.Errorf("backing file name at %d+%d out of the header", boff, blen)
	}
	h.backing = string(b[boff : boff+blen])
	return h, parseExtensions(b, extOff, version, &h)
}

// parseExtensions walks the header extensions (v3: after the header; v2
// too, in qemu's implementation) up to the end mark.
func parseExtensions(b []byte, off uint64, version uint32, h *header) error {
	be := binary.BigEndian
	for off+8 <= uint64(len(b)) {
		typ, n := be.Uint32(b[off:]), uint64(be.Uint32(b[off+4:]))
		data := off + 8
		if data+n > uint64(len(b)) {
			return fmt.Errorf("header extension %#x of %d bytes out of the header", typ, n)
		}
		switch typ {
		case 0:
			return nil
		case extBackingFormat:
			h.backingFormat = string(b[data : data+n])
		case extDataFile:
			h.dataFile = true
		}
		off = data + (n+7)&^7
	}
	if version == 2 {
		return nil // v2 headers need no end mark before the backing name
	}
	return errors.New("header extensions without an end mark")
}
