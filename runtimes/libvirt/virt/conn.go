package virt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/crimux/crimux/internal/errdefs"
)

// defaultSocket is libvirtd's socket for qemu:///system.
const defaultSocket = "/var/run/libvirt/libvirt-sock"

// Reconnect backoff bounds.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 3 * time.Second
)

// Conn keeps one connection to libvirtd and remakes it with backoff
// whenever libvirtd goes away. Callers take the current connection with
// Get, which is Unavailable while there is none.
type Conn struct {
	uri    string
	socket string
	log    *slog.Logger
	// onConnect runs after every (re)connect, e.g. to resubscribe to events
	// and resync state; it gets a context that ends with the connection.
	onConnect func(ctx context.Context, l Libvirt)
	// onReconnect counts every connect after the first (metrics).
	onReconnect func(uri string)

	// agents counts the guest-agent calls of every connection.
	agents *AgentSlots
	// pool keeps the connections of calls that go on their own (pool.go).
	pool connPool

	mu      sync.RWMutex
	l       Libvirt
	lastErr error
	// done is closed when Run has returned (the connection is closed).
	done chan struct{}
}

// NewConn returns the connection to the libvirtd of uri (only the local
// qemu:///system, with an optional ?socket=); Run makes it. onConnect
// runs after every (re)connect with the new connection, onReconnect
// after every one but the first; either may be nil.
func NewConn(uri string, log *slog.Logger, onConnect func(context.Context, Libvirt), onReconnect func(uri string)) (*Conn, error) {
	socket, err := socketOf(uri)
	if err != nil {
		return nil, err
	}
	if onReconnect == nil {
		onReconnect = func(string) {}
	}
	return &Conn{uri: uri, socket: socket, log: log, onConnect: onConnect, onReconnect: onReconnect,
		agents: NewAgentSlots(AgentCaps{}), done: make(chan struct{})}, nil
}

// SetAgentCaps bounds the guest-agent calls in flight (agentcaps.go);
// before Run. Without it the bounds are DefaultAgentCaps.
func (c *Conn) SetAgentCaps(caps AgentCaps) { c.agents = NewAgentSlots(caps) }

// UpdateAgentCaps changes the caps of a running Conn (AgentSlots.SetCaps).
func (c *Conn) UpdateAgentCaps(caps AgentCaps) { c.agents.SetCaps(caps) }

// Done is closed when Run has returned and the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// socketOf maps a local libvirt URI to its socket: qemu:///system, with an
// optional ?socket= override.
func socketOf(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("libvirt uri %q: %w", uri, err)
	}
	if u.Scheme != "qemu" || u.Host != "" || u.Path != "/system" {
		return "", fmt.Errorf("libvirt uri %q: only local qemu:///system is supported", uri)
	}
	if s := u.Query().Get("socket"); s != "" {
		return s, nil
	}
	return defaultSocket, nil
}

// Run keeps the connection up until ctx ends.
//
// Event subscriptions live as long as their connection and are never
// deregistered on a live one: the context handed to onConnect ends only
// after the connection is closed, so go-libvirt's deregistration fails
// locally and libvirtd drops the callbacks itself when the client goes.
// libvirtd 9.0 (Debian 12) crashes (use after free in
// remoteClientFreePrivateCallbacks) when a client's connection closes
// while a deregistration of that client is in flight, which is what
// cancelling the subscriptions and then disconnecting did.
func (c *Conn) Run(ctx context.Context) {
	defer close(c.done)
	delay := reconnectMin
	connected := false
	defer c.pool.drain()
	for ctx.Err() == nil {
		l, err := c.connect()
		if err != nil {
			c.setDown(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, reconnectMax)
			continue
		}
		delay = reconnectMin
		c.log.Info("connected to libvirtd", "socket", c.socket)
		if connected {
			c.onReconnect(c.uri)
		}
		connected = true
		rl := CapAgentCalls(remote{l: l, more: c}, c.agents)
		c.mu.Lock()
		c.l, c.lastErr = rl, nil
		c.mu.Unlock()
		connCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		if c.onConnect != nil {
			go c.onConnect(connCtx, rl)
		}
		select {
		case <-ctx.Done():
			c.setDown(errors.New("crimux is shutting down"))
			_ = l.Disconnect() // first: see above
			cancel()
			return
		case <-l.Disconnected():
			cancel()
			c.pool.drain() // libvirtd went: its idle connections with it
			c.log.Warn("lost libvirtd connection; reconnecting")
			c.setDown(errors.New("libvirtd connection lost"))
		}
	}
}

// dial opens a connection to libvirtd.
// dial is a connection for one call: an idle one (pool.go) or a new one.
func (c *Conn) dial() (*golibvirt.Libvirt, error) {
	if l := c.pool.take(); l != nil {
		return l, nil
	}
	return c.connect()
}

// release keeps l idle for the next call, or closes it (pool.go).
func (c *Conn) release(l *golibvirt.Libvirt, callErr error) { c.pool.put(l, callErr) }

// connect opens a new connection to libvirtd.
func (c *Conn) connect() (*golibvirt.Libvirt, error) {
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(c.socket), dialers.WithLocalTimeout(2*time.Second)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return nil, err
	}
	return l, nil
}

func (c *Conn) setDown(err error) {
	c.mu.Lock()
	c.l, c.lastErr = nil, err
	c.mu.Unlock()
}

// Get returns the live connection or Unavailable.
func (c *Conn) Get() (Libvirt, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.l == nil {
		why := "not connected yet"
		if c.lastErr != nil {
			why = c.lastErr.Error()
		}
		return nil, fmt.Errorf("libvirtd at %s: %s: %w", c.socket, why, errdefs.ErrUnavailable)
	}
	return c.l, nil
}
