package migproxy

import (
	"io"
	"sync/atomic"
)

// halfConn is a stream whose write side can be shut alone: *tls.Conn
// (close_notify) and *net.UnixConn (shutdown(SHUT_WR)). Migration and NBD
// both rely on it: one side says it is done and still reads the other's
// last words.
type halfConn interface {
	io.ReadWriter
	CloseWrite() error
}

// pipe carries bytes both ways between a and b, one goroutine per
// direction, until both have ended. A direction that reaches EOF
// half-closes its destination, so the end travels on; one that fails
// calls abort, which must close both connections so the other direction
// stops too. Bytes from a to b are added to aToB, if not nil. pipe returns
// the first error, the cause; what abort makes the other direction return
// is only its consequence.
func pipe(a, b halfConn, aToB *atomic.Int64, abort func()) error {
	errs := make(chan error, 2)
	go func() { errs <- carry(b, a, aToB, abort) }()
	go func() { errs <- carry(a, b, nil, abort) }()
	first, second := <-errs, <-errs
	if first != nil {
		return first
	}
	return second
}

// carry copies src to dst, then passes EOF on as dst's half-close.
func carry(dst, src halfConn, count *atomic.Int64, abort func()) error {
	var w io.Writer = dst
	if count != nil {
		w = countingWriter{dst, count}
	}
	if _, err := io.Copy(w, src); err != nil {
		abort()
		return err
	}
	if err := dst.CloseWrite(); err != nil {
		abort()
		return err
	}
	return nil
}

// countingWriter counts what was written, as it is written, so Bytes shows
// a migration's progress while the stream still flows.
type countingWriter struct {
	w     io.Writer
	count *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.count.Add(int64(n))
	return n, err
}
