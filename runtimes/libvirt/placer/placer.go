package placer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/runtimes/libvirt/placement"
)

// requestTimeout bounds how long a client may take to send its request.
const requestTimeout = 10 * time.Second

// Placer serves crimux-qemu-wrapper: it moves the calling process into its
// VM's cgroup before the wrapper execs qemu. It trusts nothing the client
// says but the domain name, and checks that name against the caller's own
// command line (found through SO_PEERCRED), so a process can only place
// itself as the VM it really is.
type Placer struct {
	socket  string
	lookup  func(domainName string) (cgroup.Spec, bool)
	log     *slog.Logger
	uids    []uint32
	peer    func(uid uint32) bool
	owner   func(domain string, uid uint32) bool
	exe     string
	proc    string
	layout  func() (cgroup.Layout, error)
	place   func(l cgroup.Layout, s cgroup.Spec, pid int) error
	placeMu sync.Mutex
	attach  func(domain string) (Attachment, error)
	// granted, when set, must grant every placement: crimux asked libvirt
	// to start that domain's qemu and the start is in flight (Starts).
	granted func(domain string) bool
	// launcher reads the cgroups of the process that starts qemu
	// (libvirtd): a new qemu comes from there, never from a pod.
	launcher func() (string, error)
	// handlers bounds the requests served at once.
	handlers chan struct{}
	// placed, when set, runs once a VM's process is in its cgroup,
	// before it runs qemu (its OOM score).
	placed func(domain string, pid int) error
}

// maxHandlers bounds the requests the Placer serves at once: a flood of
// connections costs a bounded number of goroutines; more are refused at
// once.
const maxHandlers = 16

// Attachment is what the wrapper hands qemu besides its placement: open
// files and the arguments naming them (placement.FDPlaceholder).
type Attachment struct {
	Files []*os.File
	Args  []string
}

// close closes the files.
func (a *Attachment) close() {
	for _, f := range a.Files {
		_ = f.Close()
	}
}

// PlacerOption configures a Placer.
type PlacerOption func(*Placer)

// New returns a Placer that will listen on socketPath (made
// connectable by every user: the caller is checked by its credentials)
// and find a VM's Spec with lookup. lookup must know a VM from before its
// domain is first started until it is undefined: libvirt starts a new qemu
// process, through the wrapper, on every start, snapshot revert and
// managed-save restore.
func New(socketPath string, lookup func(domainName string) (cgroup.Spec, bool), opts ...PlacerOption) *Placer {
	p := &Placer{
		socket:   socketPath,
		lookup:   lookup,
		log:      slog.Default(),
		proc:     "/proc",
		layout:   cgroup.Discover,
		place:    ensureAndPlace,
		handlers: make(chan struct{}, maxHandlers),
	}
	p.launcher = func() (string, error) { return launcherCgroups(p.proc) }
	for _, o := range opts {
		o(p)
	}
	return p
}

// Serve listens until ctx ends, then closes the listener, waits for the
// requests in flight and removes the socket.
func (p *Placer) Serve(ctx context.Context) error {
	ln, err := p.listen()
	if err != nil {
		return err
	}
	mine, err := os.Lstat(p.socket)
	if err != nil {
		ln.Close()
		return fmt.Errorf("placement socket: %w", err)
	}
	p.log.Info("placement socket listening", "socket", p.socket)
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer func() {
		wg.Wait()
		p.removeSocket(mine)
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			p.log.Warn("placement accept failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case p.handlers <- struct{}{}:
		default:
			p.refuse(conn, errors.New("too many placement requests at once"))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-p.handlers }()
			p.handle(conn.(*net.UnixConn))
		}()
	}
}

// removeSocket removes the socket Serve listened on, and not one another
// process put at its path since: a second crimux given the same placement
// socket replaces the first one's, and the first, stopping, must not
// remove the second's (every qemu start of the second was refused so).
func (p *Placer) removeSocket(mine os.FileInfo) {
	if now, err := os.Lstat(p.socket); err == nil && os.SameFile(mine, now) {
		_ = os.Remove(p.socket)
	}
}

func (p *Placer) listen() (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(p.socket), 0o755); err != nil {
		return nil, fmt.Errorf("placement socket directory: %w", err)
	}
	// A socket left by a previous crimux is ours to replace; anything else
	// at that path is not.
	if fi, err := os.Lstat(p.socket); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("placement socket %s: exists and is no socket", p.socket)
		}
		if err := os.Remove(p.socket); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("placement socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	// The wrapper runs as the qemu user; SO_PEERCRED, not the mode, keeps
	// strangers out.
	if err := os.Chmod(p.socket, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// refuse answers a caller that is not served with the reason and closes
// its connection at once, reading nothing.
func (p *Placer) refuse(conn net.Conn, err error) {
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(conn, placement.ErrorAnswer(err.Error()))
	conn.Close()
	p.log.Warn("qemu placement refused", "err", err)
}

func (p *Placer) handle(conn *net.UnixConn) {
	cred, err := p.checkPeer(conn)
	if err != nil {
		p.refuse(conn, err)
		return
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(requestTimeout))
	name, pid, err := p.identify(conn, cred)
	log := p.log.With("domain", name, "pid", pid)
	var att Attachment
	defer att.close()
	if err == nil {
		// Placement itself may take long (a slow cgroupfs); only its
		// answer needs to go out.
		_ = conn.SetDeadline(time.Time{})
		att, err = p.serveRequest(name, pid)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(requestTimeout))
	if err != nil {
		log.Warn("qemu placement refused", "err", err)
		_, _ = io.WriteString(conn, placement.ErrorAnswer(err.Error()))
		return
	}
	if err := placement.SendAnswer(conn, att.Args, att.Files); err != nil {
		// The wrapper will retry and find itself placed already.
		log.Warn("qemu placed but the answer was lost", "err", err)
		return
	}
	log.Info("qemu placed", "took", time.Since(start), "files", len(att.Files))
}

// checkPeer checks who connected, before anything is read from it.
func (p *Placer) checkPeer(conn *net.UnixConn) (*unix.Ucred, error) {
	cred, err := peerCred(conn)
	if err != nil {
		return nil, err
	}
	if len(p.uids) > 0 && !slices.Contains(p.uids, cred.Uid) || p.peer != nil && !p.peer(cred.Uid) {
		return nil, fmt.Errorf("caller pid %d: uid %d is not a qemu user", cred.Pid, cred.Uid)
	}
	return cred, nil
}

// identify reads the request and checks it against the caller.
func (p *Placer) identify(conn *net.UnixConn, cred *unix.Ucred) (string, int, error) {
	pid := int(cred.Pid)
	line, err := bufio.NewReader(io.LimitReader(conn, placement.MaxNameLen+2)).ReadString('\n')
	if err != nil {
		return "", pid, fmt.Errorf("read request: %w", err)
	}
	name := strings.TrimSuffix(line, "\n")
	if err := placement.ValidName(name); err != nil {
		return name, pid, err
	}
	if p.owner != nil && !p.owner(name, cred.Uid) {
		return name, pid, fmt.Errorf("pid %d runs as uid %d, not as the qemu user of %s", pid, cred.Uid, name)
	}
	if p.exe != "" {
		exe, err := os.Readlink(filepath.Join(p.proc, fmt.Sprint(pid), "exe"))
		if err != nil {
			return name, pid, fmt.Errorf("executable of pid %d: %w", pid, err)
		}
		if exe = strings.TrimSuffix(exe, " (deleted)"); exe != p.exe {
			return name, pid, fmt.Errorf("caller runs %s, not %s", exe, p.exe)
		}
	}
	cmdline, err := os.ReadFile(filepath.Join(p.proc, fmt.Sprint(pid), "cmdline"))
	if err != nil {
		return name, pid, fmt.Errorf("command line of pid %d: %w", pid, err)
	}
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	if got, ok := placement.GuestName(args[min(1, len(args)):]); !ok || got != name {
		return name, pid, fmt.Errorf("pid %d asks for domain %s but its -name is guest=%s", pid, name, got)
	}
	return name, pid, nil
}

// serveRequest places pid as domain name, then gets what to hand it.
func (p *Placer) serveRequest(name string, pid int) (Attachment, error) {
	if err := p.placeVM(name, pid); err != nil {
		return Attachment{}, err
	}
	return p.attachment(name)
}

// attachment asks attach, if set, what to hand qemu of domain name, and
// checks that it fits in an answer. It closes the files when it fails.
func (p *Placer) attachment(name string) (Attachment, error) {
	if p.attach == nil {
		return Attachment{}, nil
	}
	att, err := p.attach(name)
	if err == nil {
		_, err = placement.Answer(att.Args, len(att.Files))
	}
	if err != nil {
		att.close()
		return Attachment{}, fmt.Errorf("files and arguments for qemu of %s: %w", name, err)
	}
	return att, nil
}

func (p *Placer) placeVM(name string, pid int) error {
	spec, ok := p.lookup(name)
	if !ok {
		return fmt.Errorf("no VM of crimux is named %s", name)
	}
	l, err := p.layout()
	if err != nil {
		return err
	}
	p.placeMu.Lock()
	defer p.placeMu.Unlock()
	if err := p.mayPlace(l, spec, name, pid); err != nil {
		return err
	}
	if err := p.place(l, spec, pid); err != nil {
		return err
	}
	if p.placed != nil {
		return p.placed(name, pid)
	}
	return nil
}

// ensureAndPlace creates the leaf with its limits where it is missing (the
// VM runtime normally has), then moves pid in.
func ensureAndPlace(l cgroup.Layout, s cgroup.Spec, pid int) error {
	ok, err := l.Exists(s)
	if err != nil {
		return err
	}
	if !ok {
		if err := l.Create(s); err != nil {
			return err
		}
	}
	return l.Place(s, pid)
}

func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return cred, nil
}
