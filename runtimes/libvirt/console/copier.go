package console

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// readChunk bounds one read of console.log: a console that wrote a GiB
// while crimux was down is copied a chunk at a time.
const readChunk = 64 << 10

// A copier follows one VM's console.log into its CRI log. It keeps
// console.log open between passes, so what virtlogd wrote before it
// rotated the file (renamed it console.log.0) is read from the old file
// before the new one is followed from its start. What reaches the CRI log
// is exact: a line longer than maxLineBytes goes out in pieces tagged P
// (the line goes on) and its last piece F; nothing is counted as copied
// that was not written, and a CRI log that cannot be opened or written is
// tried again at the next pass.
type copier struct {
	src, dst, offsetFile string
	done, stopped        chan struct{}
	reopen               chan chan error
	notes                chan note
	log                  *slog.Logger

	out    *os.File // the CRI log; nil while it cannot be opened
	in     *os.File // console.log as it was opened; nil until it exists
	ino    uint64   // in's inode
	offset int64    // how far in was read
	// released is how much of in's start was given back (release.go).
	released int64
	pending  []byte // read, not yet written: a line without its end
	since    time.Time
	// resume is where the last copier stopped (loaded at start).
	resume position
	// saved is the position last written to offsetFile.
	saved position
	// buf is the read buffer, made at the first read.
	buf []byte
	// passes counts the copy passes over console.log (tests read it).
	passes atomic.Int64

	// wake is signalled when console.log changed (by notify, under watch
	// descriptor wd); recheck is how long run waits unwoken.
	wake    chan struct{}
	recheck time.Duration
	notify  *notifier
	wd      int32
}

// position is a place in one console.log: its inode (0: unknown, from an
// older crimux) and an offset.
type position struct {
	ino    uint64
	offset int64
}

func (cp *copier) run() {
	defer close(cp.stopped)
	cp.resume = readOffset(cp.offsetFile)
	if err := cp.openDst(); err != nil {
		cp.log.Warn("open CRI log; trying again at each pass", "path", cp.dst, "err", err)
	}
	defer cp.closeFiles()
	// The first pass at once: what the console wrote while crimux was down.
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-cp.done:
			cp.copy(true)
			return
		case errc := <-cp.reopen:
			if cp.out != nil {
				cp.out.Close()
				cp.out = nil
			}
			errc <- cp.openDst()
			continue
		case n := <-cp.notes:
			cp.writeNote(n)
			continue
		case <-cp.wake:
		case <-timer.C:
		}
		cp.copy(false)
		timer.Reset(cp.next())
		select { // at most a pass per copyGap, however often woken
		case <-cp.done:
		case <-time.After(copyGap):
		}
	}
}

// next is how long the copier may wait unwoken: until a pending partial
// line is due, at most recheck.
func (cp *copier) next() time.Duration {
	if len(cp.pending) == 0 {
		return cp.recheck
	}
	due := partialAfter - time.Since(cp.since) + time.Millisecond
	return max(min(due, cp.recheck), 0)
}

func (cp *copier) closeFiles() {
	if cp.out != nil {
		cp.out.Close()
	}
	if cp.in != nil {
		cp.in.Close()
	}
}

func (cp *copier) openDst() error {
	f, err := os.OpenFile(cp.dst, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	cp.out = f
	return nil
}

// copy writes what console.log gained since the last pass; final writes
// a pending partial line too (the copier stops).
func (cp *copier) copy(final bool) {
	cp.passes.Add(1)
	if cp.out == nil && cp.openDst() != nil {
		return // nothing is read that cannot be written
	}
	if !cp.flush(false) {
		return
	}
	for cp.follow() {
		if !cp.drain() {
			return
		}
		if !cp.rotated() {
			break
		}
	}
	if len(cp.pending) > 0 && (final || time.Since(cp.since) > partialAfter) {
		cp.flush(true)
	}
	cp.saveOffset()
}

// follow opens console.log if it is not open yet, at the position the
// last copier stopped at when it is the same file; false while there is
// none.
func (cp *copier) follow() bool {
	if cp.in != nil {
		return true
	}
	f, ino, err := openNoFollow(cp.src)
	if err != nil {
		return false // virtlogd has not made it yet
	}
	cp.in, cp.ino, cp.offset, cp.released = f, ino, 0, 0
	if cp.resume.ino == 0 || cp.resume.ino == ino {
		cp.offset = cp.resume.offset
	}
	cp.resume = position{}
	if fi, err := f.Stat(); err == nil && fi.Size() < cp.offset {
		cp.offset = 0 // truncated, or replaced with a shorter file
	}
	return true
}

// drain reads the open console.log to its end, a chunk at a time, and
// writes every complete line; false when the CRI log could not be written.
func (cp *copier) drain() bool {
	if cp.buf == nil {
		cp.buf = make([]byte, readChunk)
	}
	buf := cp.buf
	for {
		if fi, err := cp.in.Stat(); err == nil && fi.Size() < cp.offset {
			cp.offset, cp.pending = 0, nil // truncated in place
		}
		n, err := cp.in.ReadAt(buf, cp.offset)
		if n > 0 {
			if len(cp.pending) == 0 {
				cp.since = time.Now()
			}
			cp.pending = append(cp.pending, buf[:n]...)
			cp.offset += int64(n)
			if !cp.flush(false) {
				return false
			}
		}
		if n < len(buf) || err != nil {
			return true
		}
	}
}

// rotated reports whether console.log is another file than the one open
// (virtlogd rotated it), which is then closed: the next follow opens the
// new one from its start.
func (cp *copier) rotated() bool {
	var st unix.Stat_t
	if err := unix.Lstat(cp.src, &st); err != nil || st.Ino == cp.ino {
		return false
	}
	cp.in.Close()
	cp.in = nil
	return true
}

// flush writes the complete lines pending (and, with partial, the rest as
// a partial line) and drops them from pending only once written; false
// when the CRI log could not be written (it is reopened at the next pass).
func (cp *copier) flush(partial bool) bool {
	var out bytes.Buffer
	rest := cutLines(&out, cp.pending, partial)
	if out.Len() == 0 {
		return true
	}
	if _, err := cp.out.Write(out.Bytes()); err != nil {
		cp.log.Warn("write CRI log; trying again at the next pass", "path", cp.dst, "err", err)
		cp.out.Close()
		cp.out = nil
		return false
	}
	if len(rest) < len(cp.pending) {
		cp.since = time.Now()
	}
	cp.pending = append(cp.pending[:0], rest...)
	return true
}

// cutLines writes the CRI lines of p to out and returns what is left of p:
// every complete line tagged F; a line longer than maxLineBytes in pieces
// of maxLineBytes tagged P; with partial, what is left too, tagged P.
func cutLines(out *bytes.Buffer, p []byte, partial bool) []byte {
	for {
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0 && i <= maxLineBytes:
			writeCRILine(out, bytes.TrimSuffix(p[:i], []byte("\r")), "F")
			p = p[i+1:]
		case len(p) >= maxLineBytes:
			writeCRILine(out, p[:maxLineBytes], "P")
			p = p[maxLineBytes:]
		default:
			if partial && len(p) > 0 {
				writeCRILine(out, p, "P")
				p = p[len(p):]
			}
			return p
		}
	}
}

// saveOffset records how far console.log was written to the CRI log: a
// partial line pending is read again by the next copier. An unchanged
// position is not written again: a pass that finds nothing new costs
// three system calls, not a file created and renamed.
func (cp *copier) saveOffset() {
	if cp.in == nil {
		return
	}
	p := position{ino: cp.ino, offset: cp.offset - int64(len(cp.pending))}
	if p == cp.saved {
		return
	}
	if writeOffset(cp.offsetFile, p) {
		cp.saved = p
		cp.release(p.offset)
	}
}

// writeCRILine formats one CRI log line.
func writeCRILine(w *bytes.Buffer, line []byte, tag string) {
	writeCRILineOn(w, "stdout", line, tag)
}

// writeCRILineOn formats one CRI log line of stream.
func writeCRILineOn(w *bytes.Buffer, stream string, line []byte, tag string) {
	w.WriteString(time.Now().Format(time.RFC3339Nano))
	w.WriteByte(' ')
	w.WriteString(stream)
	w.WriteByte(' ')
	w.WriteString(tag)
	w.WriteByte(' ')
	w.Write(line)
	w.WriteByte('\n')
}

// openNoFollow opens a file crimux reads as root in a VM's directory
// without following a link, and returns its inode.
func openNoFollow(path string) (*os.File, uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: syscall.EINVAL}
	}
	return f, st.Ino, nil
}

// readOffset reads "<offset> <inode>" (an older crimux wrote "<offset>").
func readOffset(path string) position {
	f, _, err := openNoFollow(path)
	if err != nil {
		return position{}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return position{}
	}
	fields := strings.Fields(string(b))
	var p position
	if len(fields) > 0 {
		p.offset, _ = strconv.ParseInt(fields[0], 10, 64)
	}
	if len(fields) > 1 {
		p.ino, _ = strconv.ParseUint(fields[1], 10, 64)
	}
	if p.offset < 0 {
		p.offset = 0
	}
	return p
}

// writeOffset replaces the offset file, never writing through a link;
// false when it could not.
func writeOffset(path string, p position) bool {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a link planted there goes, not what it names
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return false
	}
	_, err = f.WriteString(strconv.FormatInt(p.offset, 10) + " " + strconv.FormatUint(p.ino, 10))
	if cerr := f.Close(); err != nil || cerr != nil {
		return false
	}
	return os.Rename(tmp, path) == nil
}
