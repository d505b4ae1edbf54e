package virt

import (
	"errors"
	"sync"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// Calls that may last (guest-agent calls, starts, saves) go on a
// connection of their own (remote.own, remote.long), one call at a time:
// libvirtd serves five calls of a connection at once. Opening one for
// every call costs libvirtd and crimux a connect, an auth and a close: a
// hundred exec sessions polling their guests' agents opened hundreds a
// second. Connections are kept idle between calls instead, a few of them,
// and each is still used by one call at a time.

// maxIdleConns is how many idle connections a Conn keeps.
const maxIdleConns = 8

// connPool keeps idle connections of one libvirtd.
type connPool struct {
	mu   sync.Mutex
	idle []*golibvirt.Libvirt
}

// take is an idle connection still connected, or nil.
func (p *connPool) take() *golibvirt.Libvirt {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		l := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if l.IsConnected() {
			return l
		}
		_ = l.Disconnect()
	}
	return nil
}

// put keeps l for the next call, or closes it: when its call failed on
// the connection (it may be broken), or when enough are idle.
func (p *connPool) put(l *golibvirt.Libvirt, callErr error) {
	if callErr != nil && connBroken(callErr) || !l.IsConnected() {
		_ = l.Disconnect()
		return
	}
	p.mu.Lock()
	if len(p.idle) < maxIdleConns {
		p.idle = append(p.idle, l)
		l = nil
	}
	p.mu.Unlock()
	if l != nil {
		_ = l.Disconnect()
	}
}

// drain closes every idle connection (libvirtd went away: they are dead).
func (p *connPool) drain() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, l := range idle {
		_ = l.Disconnect()
	}
}

// connBroken tells an error of the connection rather than of the call:
// libvirt's own errors leave the connection as it was.
func connBroken(err error) bool {
	var le golibvirt.Error
	return !errors.As(err, &le)
}
