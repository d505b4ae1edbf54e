package migproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// serve carries one connection from a source node: TLS handshake, header,
// admission, then the unix socket the header names. The unix socket is
// dialled only once the header names an expected token and channel, so a
// refused peer never reaches qemu.
func (l *Listener) serve(s *session, raw net.Conn) {
	conn := tls.Server(raw, l.server)
	log := l.log.With("peer", raw.RemoteAddr().String())
	token, channel, err := l.greet(conn)
	if err != nil {
		log.Warn("migration connection refused", "err", err)
		return
	}
	log = log.With("token", shortToken(token), "channel", channel)
	path, e := l.admit(s, token, channel)
	if e == nil {
		log.Warn("migration connection refused: token and channel not expected")
		return
	}
	defer l.release(e, s)
	local, err := dialLocal(path, l.headerTimeout)
	if err != nil {
		log.Warn("migration connection: target socket unreachable", "err", err)
		return
	}
	if !s.attach(local) {
		local.Close()
		return
	}
	logEnd(log, pipe(conn, local, nil, s.close))
}

// greet runs the handshake and reads the header under one deadline.
func (l *Listener) greet(conn *tls.Conn) (token, channel string, err error) {
	if err := conn.SetDeadline(time.Now().Add(l.headerTimeout)); err != nil {
		return "", "", fmt.Errorf("set header deadline: %w", err)
	}
	if err := conn.Handshake(); err != nil {
		return "", "", fmt.Errorf("TLS handshake: %w", err)
	}
	if token, channel, err = readHeader(conn); err != nil {
		return "", "", err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return "", "", fmt.Errorf("clear header deadline: %w", err)
	}
	return token, channel, nil
}

// admit returns the unix socket for token and channel, and records s
// under its expectation so cancel can cut it; nil if not expected.
func (l *Listener) admit(s *session, token, channel string) (string, *expectation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.expected[token]
	if e == nil {
		return "", nil
	}
	path, ok := e.channels[channel]
	if !ok {
		return "", nil
	}
	e.sessions[s] = struct{}{}
	return path, e
}

// release forgets an ended session of e.
func (l *Listener) release(e *expectation, s *session) {
	l.mu.Lock()
	delete(e.sessions, s)
	l.mu.Unlock()
}

// dialLocal connects to a qemu's unix socket on this node.
func dialLocal(path string, timeout time.Duration) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// logEnd logs how a carried connection ended.
func logEnd(log *slog.Logger, err error) {
	switch {
	case err == nil:
		log.Debug("migration connection ended")
	case cutByUs(err):
		log.Debug("migration connection cut", "err", err)
	default:
		log.Warn("migration connection failed", "err", err)
	}
}

// cutByUs tells the errors of a connection that Close or cancel cut:
// crimux's doing, not news worth a warning.
func cutByUs(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled)
}
