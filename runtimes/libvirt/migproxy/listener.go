package migproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"
)

// acceptPause is how long the accept loop rests after an error that is
// not the listener's close (out of fds): retrying at once would spin.
const acceptPause = 100 * time.Millisecond

// A Listener is the target side: one per crimux, on the node's migration
// address. It takes TLS connections from the source nodes' Forwarders and,
// for a token and channel it expects, carries each to the unix socket the
// target qemu listens on.
type Listener struct {
	ln            net.Listener
	server        *tls.Config
	log           *slog.Logger
	headerTimeout time.Duration
	sessions      tracker

	mu       sync.Mutex
	expected map[string]*expectation // by token

	closeOnce sync.Once
	closeErr  error
}

// An expectation is what one Expect let in: the uid of the target qemu,
// the unix socket of each channel, and the sessions carried for it,
// which its cancel cuts.
type expectation struct {
	uid      int // the target qemu's: only a socket it listens on is carried to
	channels map[string]string
	sessions map[*session]struct{}
}

// Listen listens on addr (host:port) for migration connections. server
// must require and verify client certificates (LoadTLS's server config):
// without them any host that can reach addr could try tokens.
func Listen(addr string, server *tls.Config, log *slog.Logger) (*Listener, error) {
	return listen(addr, server, log, headerTimeout)
}

// listen is Listen with the header timeout a test can shorten.
func listen(addr string, server *tls.Config, log *slog.Logger, timeout time.Duration) (*Listener, error) {
	if server == nil || server.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, fmt.Errorf("migration listener on %s: TLS config must require and verify client certificates", addr)
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := listenStreams(addr)
	if err != nil {
		return nil, fmt.Errorf("migration listener: %w", err)
	}
	l := &Listener{
		ln:            ln,
		server:        server,
		log:           log.With("migration_listener", ln.Addr().String()),
		headerTimeout: timeout,
		expected:      make(map[string]*expectation),
	}
	l.sessions.spawn(nil, l.acceptLoop)
	return l, nil
}

// Addr is the address the Listener listens on, with the port the kernel
// chose if addr asked for port 0.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Expect lets connections that name token reach the unix sockets of
// channels (channel name -> unix socket path on this node), until
// cancel, provided uid, the target qemu's, listens on them: the sockets
// are in a directory qemu owns, and a socket of anyone else's there
// (crimux's or libvirtd's, through a symlink) is refused before a byte
// is written to it. Any other token or channel is refused: the
// connection is closed and logged. cancel also cuts the connections
// still carried for token: the migration is over or abandoned, and a
// peer that hangs on must not hold the target qemu's socket.
func (l *Listener) Expect(token string, uid int, channels map[string]string) (cancel func()) {
	if !validToken(token) {
		l.log.Error("migration expected with an invalid token: no connection can match it")
	}
	if uid < 0 {
		l.log.Error("migration expected with an invalid target uid: no socket can match it", "uid", uid)
	}
	e := &expectation{uid: uid, channels: maps.Clone(channels), sessions: make(map[*session]struct{})}
	l.mu.Lock()
	l.expected[token] = e
	l.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { l.cancel(token, e) }) }
}

// cancel forgets e, unless a later Expect of the same token replaced it,
// and cuts its sessions.
func (l *Listener) cancel(token string, e *expectation) {
	l.mu.Lock()
	if l.expected[token] == e {
		delete(l.expected, token)
	}
	live := make([]*session, 0, len(e.sessions))
	for s := range e.sessions {
		live = append(live, s)
	}
	l.mu.Unlock()
	for _, s := range live {
		s.close()
	}
}

// Close closes the listener and every connection it carries, and returns
// once none of its goroutines is left.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.ln.Close()
		l.sessions.shut()
		l.sessions.wait()
	})
	return l.closeErr
}

// acceptLoop hands each connection to its own goroutine, so one slow
// handshake never delays another migration's.
func (l *Listener) acceptLoop() {
	for {
		raw, err := l.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			l.log.Warn("migration listener: accept failed", "err", err)
			time.Sleep(acceptPause)
			continue
		}
		s := &session{}
		s.attach(raw)
		if !l.sessions.spawn(s, func() { l.serve(s, raw) }) {
			raw.Close()
			return
		}
	}
}
