// Package migration is a node's part in live migrations: the
// TLS endpoint that carries the streams of VMs arriving here (migproxy),
// the key pair libvirtd's peer connections use, the limits of VMs leaving
// (how many at once, bandwidth, completion timeout) and the targets
// waiting for their VM. The migration room (package migrate) drives a
// migration; this package knows no container.
package migration

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/migproxy"
)

// Config is a node's migration settings (config.Migration).
type Config struct {
	Address, LibvirtURI, PKIDir string
	BandwidthMiB                uint64
	CompletionTimeoutPerGiB     time.Duration
	MaxOutgoing                 int
	TargetTimeout               time.Duration
	// ProgressTimeout aborts a migration that moved nothing for so long
	// (0: never).
	ProgressTimeout time.Duration
	// SocketDir holds each migration's unix sockets, one directory per
	// migration: the same path on every node (libvirt passes the one URI
	// to both qemus).
	SocketDir string
}

// DefaultSocketDir is SocketDir unless a test sets its own.
const DefaultSocketDir = "/run/crimux/migration"

// Node is this node's migration endpoint. A nil *Node migrates nothing:
// its methods say so.
type Node struct {
	cfg      Config
	listener *migproxy.Listener
	client   *tls.Config
	out      chan struct{}
	log      *slog.Logger

	mu       sync.Mutex
	incoming map[string]func() // container ID -> undo of its preparation
	// tunables are what a reload made cfg's (under mu; nil: none did).
	tunables *Tunables
}

// Tunables are the settings of Config a config reload changes while the
// node runs: each migration takes them as it starts (the target's
// timeout as it is prepared).
type Tunables struct {
	BandwidthMiB            uint64
	CompletionTimeoutPerGiB time.Duration
	ProgressTimeout         time.Duration
	TargetTimeout           time.Duration
}

// SetTunables makes t the node's from the next migration on.
func (n *Node) SetTunables(t Tunables) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tunables = &t
}

// Start listens on cfg.Address with the node's key pair.
func Start(cfg Config, log *slog.Logger) (*Node, error) {
	if cfg.SocketDir == "" {
		cfg.SocketDir = DefaultSocketDir
	}
	if cfg.MaxOutgoing < 1 {
		cfg.MaxOutgoing = 1
	}
	server, client, err := migproxy.LoadTLS(cfg.PKIDir)
	if err != nil {
		return nil, fmt.Errorf("migration: %w", err)
	}
	if err := os.MkdirAll(cfg.SocketDir, 0o711); err != nil {
		return nil, fmt.Errorf("migration: %w", err)
	}
	clearSockets(cfg.SocketDir, log)
	l, err := migproxy.Listen(cfg.Address, server, log)
	if err != nil {
		return nil, fmt.Errorf("migration: listen on %s: %w", cfg.Address, err)
	}
	return &Node{cfg: cfg, listener: l, client: client, out: make(chan struct{}, cfg.MaxOutgoing), log: log,
		incoming: map[string]func(){}}, nil
}

// Close stops carrying streams.
func (n *Node) Close() error {
	if n == nil {
		return nil
	}
	return n.listener.Close()
}

// Config is the node's settings, its tunables as they are now.
func (n *Node) Config() Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	cfg := n.cfg
	if t := n.tunables; t != nil {
		cfg.BandwidthMiB, cfg.CompletionTimeoutPerGiB, cfg.ProgressTimeout, cfg.TargetTimeout =
			t.BandwidthMiB, t.CompletionTimeoutPerGiB, t.ProgressTimeout, t.TargetTimeout
	}
	return cfg
}

// Address is where peers send this node's incoming streams.
func (n *Node) Address() string { return n.listener.Addr() }

// PeerURI is how this node's libvirtd reaches the target's (its
// advertised URI) with this node's key pair.
func (n *Node) PeerURI(advertised string) (string, error) {
	u, err := url.Parse(advertised)
	if err != nil || u.Scheme != "qemu+tls" || u.Host == "" {
		return "", fmt.Errorf("target libvirt URI %q is not qemu+tls://host/system", advertised)
	}
	q := u.Query()
	q.Set("pkipath", n.cfg.PKIDir)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Channels are the two streams of a migration: qemu's memory stream and
// the NBD copy of its disks.
var Channels = []string{"mem", "disk"}

// Dir is a migration's socket directory.
func (n *Node) Dir(token string) string { return filepath.Join(n.cfg.SocketDir, token) }

// URIs are the migration's memory and disk stream URIs.
func (n *Node) URIs(token string) (memory, disks string) {
	dir := n.Dir(token)
	return "unix://" + filepath.Join(dir, "mem.sock"), "unix://" + filepath.Join(dir, "disk.sock")
}

func (n *Node) sockets(token string) map[string]string {
	out := map[string]string{}
	for _, ch := range Channels {
		out[ch] = filepath.Join(n.Dir(token), ch+".sock")
	}
	return out
}

// clearSockets removes what migrations of a crimux that stopped left in
// dir: their streams were its own, and ended with it.
func clearSockets(dir string, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			log.Warn("remove a past migration's sockets", "path", filepath.Join(dir, e.Name()), "err", err)
		}
	}
}
