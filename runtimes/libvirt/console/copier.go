package console

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"
)

type copier struct {
	src, dst, offsetFile string
	done, stopped        chan struct{}
	reopen               chan chan error
	log                  *slog.Logger

	out     *os.File
	offset  int64
	pending []byte
	since   time.Time
}

func (cp *copier) run() {
	defer close(cp.stopped)
	cp.offset = readOffset(cp.offsetFile)
	if err := cp.openDst(); err != nil {
		cp.log.Error("open CRI log", "path", cp.dst, "err", err)
		return
	}
	defer func() { cp.out.Close() }()
	tick := time.NewTicker(consolePoll)
	defer tick.Stop()
	for {
		select {
		case <-cp.done:
			cp.copy(true)
			return
		case errc := <-cp.reopen:
			cp.out.Close()
			errc <- cp.openDst()
		case <-tick.C:
			cp.copy(false)
		}
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

// copy appends what console.log gained since the last offset.
func (cp *copier) copy(final bool) {
	f, err := os.Open(cp.src)
	if err != nil {
		return // virtlogd has not made it yet
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < cp.offset {
		cp.offset = 0 // truncated or replaced
	}
	buf, err := io.ReadAll(io.NewSectionReader(f, cp.offset, 1<<30))
	if err != nil || (len(buf) == 0 && len(cp.pending) == 0) {
		return
	}
	cp.offset += int64(len(buf))
	if len(cp.pending) == 0 && len(buf) > 0 {
		cp.since = time.Now()
	}
	cp.pending = append(cp.pending, buf...)
	cp.flushLines(final || time.Since(cp.since) > partialAfter)
	writeOffset(cp.offsetFile, cp.offset-int64(len(cp.pending)))
}

// flushLines writes every complete line, and the rest as a partial line
// when forced.
func (cp *copier) flushLines(force bool) {
	var out bytes.Buffer
	for {
		i := bytes.IndexByte(cp.pending, '\n')
		if i < 0 && len(cp.pending) > maxLineBytes {
			i = maxLineBytes
		}
		if i < 0 {
			break
		}
		writeCRILine(&out, cp.pending[:i], "F")
		cp.pending = cp.pending[min(i+1, len(cp.pending)):]
		cp.since = time.Now()
	}
	if force && len(cp.pending) > 0 {
		writeCRILine(&out, cp.pending, "P")
		cp.pending = nil
	}
	if out.Len() > 0 {
		if _, err := cp.out.Write(out.Bytes()); err != nil {
			cp.log.Warn("write CRI log", "err", err)
		}
	}
}

// writeCRILine formats one CRI log line; serial consoles end lines with
// \r\n, the \r is dropped.
func writeCRILine(w *bytes.Buffer, line []byte, tag string) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	w.WriteString(time.Now().Format(time.RFC3339Nano))
	w.WriteString(" stdout ")
	w.WriteString(tag)
	w.WriteByte(' ')
	w.Write(line)
	w.WriteByte('\n')
}

func readOffset(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}

func writeOffset(path string, off int64) {
	tmp := path + ".tmp"
	if os.WriteFile(tmp, []byte(strconv.FormatInt(off, 10)), 0o600) == nil {
		_ = os.Rename(tmp, path)
	}
}
