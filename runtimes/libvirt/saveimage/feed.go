package saveimage

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// FeedSpec says what goes into a clone's FIFO.
type FeedSpec struct {
	FIFO     string // path to create; its directory should be root's alone
	XML      string // the clone's domain XML, which libvirt restores unchecked
	Cookie   string // the template's Image.Cookie, unchanged; "" for none
	Template string // the template save image holding the qemu stream
	Offset   int64  // the template's Image.StreamOffset
}

// Feed writes one clone's save image into a FIFO: a new header, then the
// template's stream. Call libvirt's DomainRestoreFlags(Path, nil, …),
// which opens the FIFO and returns once qemu has loaded the stream, then
// Wait. If the restore fails, call Abort: libvirt may never have opened
// the FIFO, and the feed would wait for a reader until its context ends.
// The FIFO is removed when the feed ends, however it ends. Never restore
// it with DomainSaveBypassCache, which makes libvirt open it O_DIRECT and
// read through its iohelper, both meant for regular files.
type Feed struct {
	path   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// StartFeed checks spec, opens the template and creates the FIFO, then
// feeds it in a goroutine until the whole stream is written, the reader
// goes away, or ctx ends. Errors in spec, the template or the FIFO's
// creation are returned here, with nothing left behind.
func StartFeed(ctx context.Context, spec FeedSpec) (*Feed, error) {
	head, err := cloneHeader(spec.XML, spec.Cookie)
	if err != nil {
		return nil, err
	}
	src, err := openStream(spec.Template, spec.Offset)
	if err != nil {
		return nil, err
	}
	pipe, err := makeFIFO(spec.FIFO)
	if err != nil {
		src.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Feed{path: spec.FIFO, cancel: cancel, done: make(chan struct{})}
	go f.run(ctx, pipe, head, src)
	return f, nil
}

// Path is the FIFO to restore from.
func (f *Feed) Path() string { return f.path }

// Wait blocks until the feed ends and returns its error: nil once the
// whole stream is in the pipe. Any number of goroutines may wait.
func (f *Feed) Wait() error {
	<-f.done
	return f.err
}

// Abort stops the feed if it is still running and waits for it to clean
// up. It returns Wait's error: nil if the feed had already finished,
// context.Canceled if Abort stopped it.
func (f *Feed) Abort() error {
	f.cancel()
	return f.Wait()
}

func (f *Feed) run(ctx context.Context, pipe *fifo, head []byte, src *stream) {
	defer close(f.done)
	defer f.cancel()
	f.err = feed(ctx, pipe, head, src)
	src.Close()
	if err := pipe.remove(); err != nil && f.err == nil {
		f.err = err
	}
}

// feed does the writing; the caller closes src and removes the FIFO.
func feed(ctx context.Context, pipe *fifo, head []byte, src *stream) error {
	w, err := pipe.openWriter(ctx)
	if err != nil {
		return err
	}
	defer w.Close()
	// A write into a pipe nobody drains (qemu hung mid-load) would block
	// forever; the deadline wakes it when ctx ends.
	stop := context.AfterFunc(ctx, func() { w.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	growPipe(w)
	if _, err := w.Write(head); err != nil {
		return writeError(ctx, pipe.path, "the clone header", 0, err)
	}
	n, err := src.sendTo(w)
	if err != nil {
		return writeError(ctx, pipe.path, "the template stream", int64(len(head))+n, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("close fifo %s: %w", pipe.path, err)
	}
	return nil
}

// writeError names why a write failed: ctx ended it, the reader left
// (EPIPE: libvirtd refused the header, or qemu failed mid-load; their own
// error says why), or something else.
func writeError(ctx context.Context, path, what string, sent int64, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("fifo %s: stopped writing %s after %d bytes: %w", path, what, sent, ctx.Err())
	case errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("fifo %s: the reader closed it after %d bytes, while %s was written: %w", path, sent, what, err)
	default:
		return fmt.Errorf("fifo %s: write %s after %d bytes: %w", path, what, sent, err)
	}
}
