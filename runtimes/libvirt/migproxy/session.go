package migproxy

import (
	"io"
	"sync"
)

// A session is one carried connection: the TCP connection under the TLS
// one and the unix socket connection, once each is there. Closing it
// closes the raw connections, never the *tls.Conn: tls.Conn.Close sends
// close_notify and can block behind a Write stuck on a peer that stopped
// reading, which is exactly the connection Close has to cut.
type session struct {
	mu     sync.Mutex
	conns  []io.Closer
	closed bool
}

// attach adds c to the session; false if the session is closed already,
// and then the caller closes c.
func (s *session) attach(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

// close closes every connection of the session, once. It is pipe's abort
// as well as the session's end, so it is safe from any goroutine.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, c := range s.conns {
		c.Close()
	}
}

// A tracker owns the goroutines of a Listener or a Forwarder and the
// sessions they carry, so that Close can cut every session and return
// only once no goroutine of theirs is left.
type tracker struct {
	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// spawn runs fn in a goroutine Close waits for, with s (if not nil) among
// the sessions Close cuts. It returns false, running nothing, once the
// tracker is closed: the WaitGroup is never added to after Close waits.
func (t *tracker) spawn(s *session, fn func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if s != nil {
		if t.sessions == nil {
			t.sessions = make(map[*session]struct{})
		}
		t.sessions[s] = struct{}{}
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.forget(s)
		fn()
	}()
	return true
}

// forget drops an ended session, closing it if fn left it open.
func (t *tracker) forget(s *session) {
	if s == nil {
		return
	}
	s.close()
	t.mu.Lock()
	delete(t.sessions, s)
	t.mu.Unlock()
}

// shut refuses new goroutines and cuts every session. Call wait after
// whatever else blocks the goroutines (a listener's Accept) is closed.
func (t *tracker) shut() {
	t.mu.Lock()
	t.closed = true
	live := make([]*session, 0, len(t.sessions))
	for s := range t.sessions {
		live = append(live, s)
	}
	t.mu.Unlock()
	for _, s := range live {
		s.close()
	}
}

// wait returns when every spawned goroutine has returned.
func (t *tracker) wait() { t.wg.Wait() }
