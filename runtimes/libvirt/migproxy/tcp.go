package migproxy

import (
	"context"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A peer that goes away without a word (a link cut, a node powered off)
// leaves a TCP connection that neither end closes: the kernel retransmits
// for a quarter of an hour. qemu, behind it, would wait as long in the
// middle of a monitor command (an NBD request being drained), and libvirt
// with it. So the streams' TCP connections give up on a silent peer in
// seconds: unacknowledged data for deadPeer (TCP_USER_TIMEOUT), or an
// idle connection that does not answer keepalives for about as long.
// The connection closes, crimux closes qemu's unix socket behind it, and
// qemu fails the migration at once.
const deadPeer = 15 * time.Second

var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 3 * time.Second, Count: 3}

// tcpControl sets TCP_USER_TIMEOUT on a stream's socket (a listening
// socket's accepted connections inherit it).
func tcpControl(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(deadPeer.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// streamDialer dials a target's streams endpoint.
func streamDialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAliveConfig: keepAlive, Control: tcpControl}
}

// listenStreams listens for sources' streams.
func listenStreams(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: keepAlive, Control: tcpControl}
	return lc.Listen(context.Background(), "tcp", addr)
}
