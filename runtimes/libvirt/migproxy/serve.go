package migproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/tenantfs"
)

// serve carries one connection from a source node: TLS handshake, header,
// admission, then the unix socket the header names. The unix socket is
// dialled only once the header names an expected token and channel, so a
// refused peer never reaches qemu; and it is carried to only if it is
// the target qemu's (dialLocal), so the stream never reaches another
// process.
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
	local, err := dialLocal(path, e.uid, l.headerTimeout)
	if errors.Is(err, errForeignSocket) {
		log.Warn("migration connection refused: the target socket is not the target qemu's", "err", err)
		return
	}
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

// errForeignSocket marks a target socket refused because it may not be
// the target qemu's: not a socket (a symlink included), or one another
// uid listens on.
var errForeignSocket = errors.New("is not the target qemu's")

// dialLocal connects to the target qemu's unix socket at path, and only
// to one that uid, the target qemu's, listens on.
//
// path is in the target qemu's socket directory, which its uid owns:
// qemu can put anything there, such as a symlink to crimux's or
// libvirtd's socket, to have crimux, root, write the source's stream
// into a daemon. So path is opened without following a last component
// that is a link (O_PATH|O_NOFOLLOW: the link itself is opened, and
// opening a FIFO or device there has no effect), must be a socket, and
// is connected to through /proc/self/fd, which reaches that very inode
// with no second lookup of path that qemu could race. The directories
// above are crimux's: the socket root, then the migration's directory
// crimux made there, which qemu cannot rename or replace. Once
// connected, the peer (SO_PEERCRED: the effective uid of whoever called
// listen) must be uid: that also refuses what no look at the path can
// tell, a hard link to another process's socket. Every refusal comes
// before a byte is written to the socket, and so before one is read
// for it from the source.
func dialLocal(path string, uid int, timeout time.Duration) (*net.UnixConn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s %w: %s, not a socket", path, errForeignSocket, tenantfs.FileKind(st.Mode))
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	uc := c.(*net.UnixConn)
	peer, err := peerUID(uc)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(peer) != int64(uid) { // a negative uid matches none
		uc.Close()
		return nil, fmt.Errorf("%s %w: uid %d listens on it, the target qemu runs as %d", path, errForeignSocket, peer, uid)
	}
	return uc, nil
}

// peerUID is the uid of the process that listened on c's peer socket.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred.Uid, nil
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
