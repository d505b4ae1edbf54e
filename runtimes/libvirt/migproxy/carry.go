package migproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// acceptLoop takes the source qemu's connections on one channel's socket;
// each gets its own goroutine and TLS connection, as qemu's NBD client may
// open several.
func (fw *Forwarder) acceptLoop(channel string, ln *net.UnixListener) {
	for {
		local, err := ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			fw.log.Warn("migration forwarder: accept failed", "channel", channel, "err", err)
			time.Sleep(acceptPause)
			continue
		}
		s := &session{}
		s.attach(local)
		if !fw.sessions.spawn(s, func() { fw.carry(s, channel, local) }) {
			local.Close()
			return
		}
	}
}

// carry takes one local connection to the target and pipes it there.
func (fw *Forwarder) carry(s *session, channel string, local *net.UnixConn) {
	log := fw.log.With("channel", channel)
	conn, err := fw.dial(s, channel)
	if err != nil {
		if cutByUs(err) {
			log.Debug("migration connection cut before it reached the target", "err", err)
		} else {
			log.Warn("migration connection: target unreachable", "err", err)
		}
		return
	}
	logEnd(log, pipe(local, conn, &fw.bytes, s.close))
}

// dial opens the TLS connection to the target and writes the header; the
// raw connection joins s, so Close can cut it.
func (fw *Forwarder) dial(s *session, channel string) (*tls.Conn, error) {
	c, err := fw.dialer.DialContext(fw.ctx, "tcp", fw.target)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", fw.target, err)
	}
	conn := c.(*tls.Conn)
	if !s.attach(conn.NetConn()) {
		conn.NetConn().Close()
		return nil, net.ErrClosed
	}
	if err := conn.SetWriteDeadline(time.Now().Add(headerTimeout)); err != nil {
		return nil, fmt.Errorf("set header deadline: %w", err)
	}
	if err := writeHeader(conn, fw.token, channel); err != nil {
		return nil, fmt.Errorf("write header to %s: %w", fw.target, err)
	}
	if err := conn.SetWriteDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("clear header deadline: %w", err)
	}
	return conn, nil
}
