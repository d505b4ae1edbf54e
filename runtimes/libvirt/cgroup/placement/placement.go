// Package placement is the wire protocol between crimux-qemu-wrapper (the
// client, running as the qemu user inside libvirt's child process) and
// crimux's Placer (the server, root), plus the parsing of qemu's `-name`
// argument that both sides use to tell a crimux VM from anything else.
//
// The protocol is one exchange per connection, line based:
//
//	client: <domain name>\n
//	server: ok\n                  (the client is now in the VM's cgroup)
//	server: error: <message>\n    (placement refused or failed; do not run qemu)
//
// The server learns who the client is from SO_PEERCRED, never from the
// request. This package is standard library only, so the wrapper stays a
// tiny static binary.
package placement

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// DefaultSocket is where the Placer listens unless configured otherwise.
// libvirt clears qemu's environment, so the wrapper cannot rely on an
// environment variable to find it: the path is fixed (or baked in at build
// time with -ldflags "-X main.placementSocket=…").
const DefaultSocket = "/run/crimux/placement.sock"

// DefaultWrapper is where test/bed/libvirt-up.sh installs
// crimux-qemu-wrapper, the <emulator> of crimux's domains.
const DefaultWrapper = "/usr/local/lib/crimux/crimux-qemu-wrapper"

// SocketEnv overrides the socket path in the wrapper where the environment
// does reach it (tests, or <qemu:env> in the domain XML).
const SocketEnv = "CRIMUX_PLACEMENT_SOCKET"

// DomainPrefix marks a libvirt domain as crimux's: only those are placed.
const DomainPrefix = "crimux-"

// MaxNameLen bounds a request line; libvirt domain names are far shorter.
const MaxNameLen = 200

// Answers on the wire.
const (
	AnswerOK    = "ok"
	errorPrefix = "error: "
)

// ErrRefused is an answer of the server: retrying will not help.
var ErrRefused = errors.New("placement refused")

// GuestName returns the domain name carried by qemu's `-name` argument in
// args (qemu's argv without argv[0]), as libvirt writes it:
// `-name guest=<name>,debug-threads=on` (commas in a name doubled). It also
// accepts the legacy `-name <name>` form. ok is false when there is none.
func GuestName(args []string) (name string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		var val string
		switch {
		case a == "-name" || a == "--name":
			if i+1 >= len(args) {
				return "", false
			}
			val = args[i+1]
		case strings.HasPrefix(a, "-name="):
			val = strings.TrimPrefix(a, "-name=")
		case strings.HasPrefix(a, "--name="):
			val = strings.TrimPrefix(a, "--name=")
		default:
			continue
		}
		first := firstOption(val)
		if v, found := strings.CutPrefix(first, "guest="); found {
			first = v
		} else if strings.Contains(first, "=") {
			// Some other key first (qemu allows any order): look for guest=.
			first = ""
			for _, opt := range splitOptions(val) {
				if v, found := strings.CutPrefix(opt, "guest="); found {
					first = v
				}
			}
		}
		return first, first != ""
	}
	return "", false
}

// IsCrimuxDomain tells whether a domain name is one crimux placed.
func IsCrimuxDomain(name string) bool {
	return strings.HasPrefix(name, DomainPrefix) && len(name) > len(DomainPrefix)
}

// firstOption is the first element of a qemu option string.
func firstOption(val string) string {
	opts := splitOptions(val)
	if len(opts) == 0 {
		return ""
	}
	return opts[0]
}

// splitOptions splits qemu's comma-separated options, where ",," is a
// literal comma.
func splitOptions(val string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(val); i++ {
		if val[i] == ',' {
			if i+1 < len(val) && val[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(val[i])
	}
	return append(out, cur.String())
}

// ValidName checks a domain name before it goes on the wire or into a
// lookup: a crimux name, bounded, printable, no path separators.
func ValidName(name string) error {
	if !IsCrimuxDomain(name) {
		return fmt.Errorf("domain name %q does not start with %q", name, DomainPrefix)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("domain name of %d bytes is longer than %d", len(name), MaxNameLen)
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f || r == '/' {
			return fmt.Errorf("domain name %q holds a space, control character or '/'", name)
		}
	}
	return nil
}

// Request asks the server at socket to place the calling process as domain
// name, retrying while the server is absent or goes away before it answers
// (a crimux restart), until ctx ends. It returns nil once the server said
// ok, an error wrapping ErrRefused when the server said no, and ctx's error
// (with the last failure) when time ran out.
func Request(ctx context.Context, socket, name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	var last error
	backoff := 50 * time.Millisecond
	for {
		err := requestOnce(ctx, socket, name)
		if err == nil || errors.Is(err, ErrRefused) {
			return err
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

func requestOnce(ctx context.Context, socket, name string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte(name + "\n")); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	line = strings.TrimSuffix(line, "\n")
	if line == AnswerOK {
		return nil
	}
	if msg, ok := strings.CutPrefix(line, errorPrefix); ok {
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	return fmt.Errorf("%w: unexpected answer %q", ErrRefused, line)
}

// ErrorAnswer is the line the server sends to refuse, message flattened to
// one line.
func ErrorAnswer(msg string) string {
	msg = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, msg)
	return errorPrefix + msg + "\n"
}
