package saveimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// pipeSize is the FIFO buffer the feed asks for. The default 64 KiB would
// have qemu wake for every 16 pages; 1 MiB (the default pipe-max-size)
// lets one splice move 256.
const pipeSize = 1 << 20

// stream is the qemu migration stream inside a template save image.
type stream struct {
	file   *os.File
	offset int64 // where the next byte to send is
	size   int64
}

// openStream opens the template before the FIFO exists, so that a wrong
// path or offset fails the caller at once instead of a restore later.
func openStream(path string, offset int64) (*stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open template stream: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat template %s: %w", path, err)
	}
	if offset < headerSize || offset > st.Size() {
		f.Close()
		return nil, fmt.Errorf("template %s: stream offset %d outside the %d-byte file", path, offset, st.Size())
	}
	return &stream{file: f, offset: offset, size: st.Size()}, nil
}

// growPipe is only a speed-up: a failure (an unprivileged caller above
// pipe-max-size) leaves the default buffer, which works.
func growPipe(w *os.File) {
	if raw, err := w.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

// sendTo copies the stream to EOF into the pipe w, returning how many
// bytes it sent. splice moves page-cache pages into the pipe without
// copying them through crimux; a source file system that cannot splice
// answers EINVAL, and the rest goes through io.Copy.
func (s *stream) sendTo(w *os.File) (int64, error) {
	start := s.offset
	err := s.splice(w)
	if errors.Is(err, unix.EINVAL) {
		n, err := io.Copy(w, io.NewSectionReader(s.file, s.offset, s.size-s.offset))
		return s.offset - start + n, err
	}
	return s.offset - start, err
}

// splice runs non-blocking splice calls through w's poller, which waits
// while the pipe is full and gives up at w's write deadline.
func (s *stream) splice(w *os.File) error {
	raw, err := w.SyscallConn()
	if err != nil {
		return err
	}
	src := int(s.file.Fd())
	defer runtime.KeepAlive(s.file)
	for {
		var n int64
		var spliceErr error
		err := raw.Write(func(fd uintptr) bool {
			n, spliceErr = unix.Splice(src, &s.offset, int(fd), nil, pipeSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return spliceErr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return err
		case spliceErr == unix.EINTR:
			continue
		case spliceErr != nil:
			return spliceErr
		case n == 0:
			return nil
		}
	}
}

func (s *stream) Close() error {
	return s.file.Close()
}
