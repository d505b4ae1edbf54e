package migproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds the TCP connect and TLS handshake to the target: the
// source qemu waits on its unix connection meanwhile, and libvirt's own
// migration timeout is the better judge of a slow network.
const dialTimeout = 10 * time.Second

// Forward says what a Forwarder carries: the source side of one migration.
type Forward struct {
	Token    string
	Target   string // host:port of the target's Listener
	Client   *tls.Config
	Channels map[string]string // channel -> local unix socket path
	// UID and GID own the sockets (mode 0600) and, if Start makes it, their
	// directory (0700): the source qemu runs as the VM's own uid.
	UID, GID int
	Log      *slog.Logger
}

// A Forwarder listens on the local unix sockets of one migration and
// carries each connection the source qemu opens to the target's Listener,
// over TLS, behind a header that names the token and the channel.
type Forwarder struct {
	token, target string
	log           *slog.Logger
	dialer        *tls.Dialer
	ctx           context.Context // cancelled by Close, to cut dials short
	stop          context.CancelFunc
	bytes         atomic.Int64
	sessions      tracker
	listeners     []*net.UnixListener
	madeDirs      []string

	closeOnce sync.Once
	closeErr  error
}

// Start listens on f's unix sockets and carries their connections until
// Close. On error nothing it made is left behind.
func Start(f Forward) (*Forwarder, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	fw := newForwarder(f)
	if err := fw.listenAll(f); err != nil {
		fw.Close()
		return nil, fmt.Errorf("migration forwarder %s: %w", shortToken(f.Token), err)
	}
	return fw, nil
}

// validate checks f before anything is made on the node.
func (f Forward) validate() error {
	switch {
	case !validToken(f.Token):
		return errors.New("migration forwarder: token is not 32 lowercase hex characters")
	case f.Target == "":
		return errors.New("migration forwarder: no target address")
	case f.Client == nil:
		return errors.New("migration forwarder: no client TLS config")
	case len(f.Channels) == 0:
		return errors.New("migration forwarder: no channels")
	}
	for channel, path := range f.Channels {
		if !validChannel(channel) {
			return fmt.Errorf("migration forwarder: invalid channel name %q", channel)
		}
		if !filepath.IsAbs(path) {
			return fmt.Errorf("migration forwarder: channel %s: socket path %q is not absolute", channel, path)
		}
	}
	return nil
}

func newForwarder(f Forward) *Forwarder {
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Forwarder{
		token:  f.Token,
		target: f.Target,
		log:    log.With("token", shortToken(f.Token), "target", f.Target),
		dialer: &tls.Dialer{NetDialer: streamDialer(dialTimeout), Config: f.Client},
		ctx:    ctx,
		stop:   stop,
	}
}

// listenAll makes every socket while their directories are still root's
// alone, and only then hands the directories it made to the VM's uid.
func (fw *Forwarder) listenAll(f Forward) error {
	channels := slices.Sorted(maps.Keys(f.Channels))
	for _, channel := range channels {
		if err := fw.prepareDir(filepath.Dir(f.Channels[channel])); err != nil {
			return fmt.Errorf("channel %s: %w", channel, err)
		}
	}
	for _, channel := range channels {
		ln, err := fw.listen(f.Channels[channel], f.UID, f.GID)
		if err != nil {
			return fmt.Errorf("channel %s: %w", channel, err)
		}
		fw.sessions.spawn(nil, func() { fw.acceptLoop(channel, ln) })
	}
	for _, dir := range fw.madeDirs {
		if err := os.Chown(dir, f.UID, f.GID); err != nil {
			return fmt.Errorf("hand socket directory to the VM: %w", err)
		}
	}
	return nil
}

// Bytes is how many bytes went from source to target so far, all channels
// and connections together, headers not counted.
func (fw *Forwarder) Bytes() int64 { return fw.bytes.Load() }

// Close stops listening, closes every connection, removes the sockets and
// directories it made, and returns once none of its goroutines is left.
func (fw *Forwarder) Close() error {
	fw.closeOnce.Do(func() {
		fw.stop()
		var errs []error
		for _, ln := range fw.listeners {
			errs = append(errs, ln.Close()) // unlinks the socket
		}
		fw.sessions.shut()
		fw.sessions.wait()
		for _, dir := range slices.Backward(fw.madeDirs) {
			if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove socket directory: %w", err))
			}
		}
		fw.closeErr = errors.Join(errs...)
	})
	return fw.closeErr
}
