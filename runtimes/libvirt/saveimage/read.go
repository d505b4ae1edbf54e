package saveimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// Image is what a save image holds before its qemu stream.
type Image struct {
	XML        string // the domain XML libvirt restores when given none
	Cookie     string // the <qemu-save-cookie> (CPU, slirp); "" if the image has none
	Version    uint32 // always 2: Read refuses any other
	Compressed uint32 // libvirt's save_image_format: 0 raw, 1 gzip, 2 bzip2, 3 xz, 4 lzop
	WasRunning bool   // whether libvirt resumes the CPUs when the restore has no flag
	// StreamOffset is where qemu's migration stream starts: the header plus
	// data_len. libvirt's writer pads data_len, so it is not page-aligned.
	StreamOffset int64
	Size         int64 // the file's size; 0 from Parse, which cannot know it
}

// Read parses the header of the save image at path as libvirt 9.0 does.
// It accepts only a finished image of version 2, and checks data_len
// against the file size before reading it.
func Read(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open save image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat save image %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		// Reading a FIFO or device would consume what libvirt should read.
		return nil, fmt.Errorf("save image %s: %w: %s is not a regular file", path, ErrNotSaveImage, st.Mode().Type())
	}
	img, err := parse(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("save image %s: %w", path, err)
	}
	img.Size = st.Size()
	return img, nil
}

// Parse reads a save image's header, XML and cookie from r, as Read does,
// and leaves r at the first byte of the qemu stream. It reads data_len
// bytes as they come rather than allocating them first, so a forged
// data_len cannot make it reserve 4 GiB.
func Parse(r io.Reader) (*Image, error) {
	return parse(r, -1)
}

// parse checks data_len against size when size is known (not -1).
func parse(r io.Reader, size int64) (*Image, error) {
	var raw [headerSize]byte
	if n, err := io.ReadFull(r, raw[:]); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, n, headerSize)
	} else if err != nil {
		return nil, fmt.Errorf("read the %d-byte header: %w", headerSize, err)
	}
	h, err := decodeHeader(raw[:])
	if err != nil {
		return nil, err
	}
	streamOffset := headerSize + int64(h.dataLen)
	if size >= 0 && streamOffset > size {
		return nil, fmt.Errorf("%w: data_len %d runs past the end of the %d-byte file", ErrTruncated, h.dataLen, size)
	}
	data, err := readData(r, h.dataLen)
	if err != nil {
		return nil, err
	}
	xml, cookie, err := splitData(data, h.cookieOffset)
	if err != nil {
		return nil, err
	}
	return &Image{
		XML: xml, Cookie: cookie,
		Version: h.version, Compressed: h.compressed, WasRunning: h.wasRunning != 0,
		StreamOffset: streamOffset,
	}, nil
}

func readData(r io.Reader, dataLen uint32) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, int64(dataLen))
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data_len %d, but the image ends %d bytes after the header", ErrTruncated, dataLen, n)
	}
	if err != nil {
		return nil, fmt.Errorf("read %d bytes of XML and cookie: %w", dataLen, err)
	}
	return buf.Bytes(), nil
}

// splitData cuts data_len bytes as qemuSaveImageOpen does: the XML fills
// cookieOffset bytes, or all of them when cookieOffset is 0; the cookie
// and padding fill the rest. Each string ends at its first NUL; libvirt
// assumes one is there, crimux checks.
func splitData(data []byte, cookieOffset uint32) (xml, cookie string, err error) {
	xmlLen := len(data)
	if cookieOffset != 0 {
		xmlLen = int(cookieOffset)
	}
	xml, ok := cString(data[:xmlLen])
	if !ok || xml == "" {
		return "", "", fmt.Errorf("%w: the domain XML is empty or not NUL-terminated within %d bytes", ErrNotSaveImage, xmlLen)
	}
	if rest := data[xmlLen:]; len(rest) > 0 {
		if cookie, ok = cString(rest); !ok {
			return "", "", fmt.Errorf("%w: the cookie is not NUL-terminated within %d bytes", ErrNotSaveImage, len(rest))
		}
	}
	return xml, cookie, nil
}

func cString(b []byte) (string, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", false
	}
	return string(b[:i]), true
}

// Clonable says whether clones can be fed from this image: its stream must
// be raw, since a clone's header says compressed 0 and the template's
// stream goes behind it unchanged, and there must be a stream at all.
func (img *Image) Clonable() error {
	if img.Compressed != 0 {
		return fmt.Errorf("%w with %s; templates need qemu.conf save_image_format = \"raw\"", ErrCompressed, compressionName(img.Compressed))
	}
	if img.Size != 0 && img.Size <= img.StreamOffset {
		return fmt.Errorf("%w: no qemu stream after the %d bytes of header", ErrTruncated, img.StreamOffset)
	}
	return nil
}
