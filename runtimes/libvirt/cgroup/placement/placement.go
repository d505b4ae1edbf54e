// Package placement is the wire protocol between crimux-qemu-wrapper (the
// client, running as the qemu user inside libvirt's child process) and
// crimux's Placer (the server, root), plus the parsing of qemu's `-name`
// argument that both sides use to tell a crimux VM from anything else.
//
// The protocol is one exchange per connection, line based:
//
//	client: <domain name>\n
//	server: ok\n                  (the client is now in the VM's cgroup)
//	server: ok <n>\n<arg 1>\n…<arg n>\n
//	                              (placed, and qemu gets these arguments
//	                              and the files sent with them)
//	server: error: <message>\n    (placement refused or failed; do not run qemu)
//
// An "ok <n>" answer (1 ≤ n ≤ MaxArgs, in decimal) hands qemu n more
// arguments, one a line, each at most MaxArgLen bytes and without newline
// or NUL, and up to MaxFDs open files, sent as SCM_RIGHTS on the same
// sendmsg as the answer's first bytes. This is how crimux, root in the pod's
// network namespace, gives qemu, in the host's, its tap devices. An argument
// names the i-th file with the placeholder FDPlaceholder(i), "{fd<i>}"
// (e.g. "tap,id=net0,fd={fd0}"), which the client replaces with the number
// the file got in its own process. Every placeholder names a file that came
// and every file that came is named, so the client knows how many to expect;
// the client keeps them open across exec. Both sides check these rules: the
// server refuses (answers an error) rather than send a broken answer, and the
// client refuses (ErrRefused) a broken answer it receives.
//
// The server learns who the client is from SO_PEERCRED, never from the
// request. This package is standard library and golang.org/x/sys/unix only,
// so the wrapper stays a tiny static binary.
package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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

// Limits of an ok answer; both sides refuse one beyond them.
const (
	MaxArgs   = 32   // arguments for qemu in one answer
	MaxFDs    = 16   // files sent with one answer
	MaxArgLen = 4096 // bytes of one argument
)

// maxAnswer bounds the bytes of a whole answer.
const maxAnswer = len("ok 32\n") + MaxArgs*(MaxArgLen+1)

// readChunk is how much one read of the answer asks for.
const readChunk = 4096

// ErrRefused is a refusal by the server, or an answer of it that breaks the
// protocol: retrying will not help.
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
// (a crimux restart), until ctx ends. Once the server said ok it returns the
// arguments its answer hands qemu (nil for a plain ok), placeholders
// replaced by the numbers of the files that came with them, which stay open
// and are inherited across exec. It returns an error wrapping ErrRefused
// when the server said no or broke the protocol, and ctx's error (with the
// last failure) when time ran out. Files of a failed attempt are closed.
func Request(ctx context.Context, socket, name string) ([]string, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	var last error
	backoff := 50 * time.Millisecond
	for {
		args, err := requestOnce(ctx, socket, name)
		if err == nil || errors.Is(err, ErrRefused) {
			return args, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// requestOnce is one exchange with the server; it closes whatever files
// came when it fails.
func requestOnce(ctx context.Context, socket, name string) ([]string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte(name + "\n")); err != nil {
		return nil, fmt.Errorf("send request: %w", err)
	}
	args, fds, err := readAnswer(conn)
	if err == nil {
		args, err = resolve(args, fds)
	}
	if err == nil {
		err = inherit(fds)
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	return args, nil
}

// readAnswer reads until the server's answer is complete (a stream socket
// may deliver it in pieces), collecting the files that come with it. It
// returns the received fds even with an error, for the caller to close.
func readAnswer(conn *net.UnixConn) (args []string, fds []int, err error) {
	var data []byte
	buf := make([]byte, readChunk)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	for {
		n, oobn, flags, _, rerr := conn.ReadMsgUnix(buf, oob)
		got, err := parseRights(oob[:oobn])
		fds = append(fds, got...)
		if err != nil {
			return nil, fds, err
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return nil, fds, fmt.Errorf("%w: more than %d files came with the answer", ErrRefused, MaxFDs)
		}
		data = append(data, buf[:n]...)
		args, done, err := parseAnswer(data)
		if err != nil || done {
			return args, fds, err
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			return nil, fds, fmt.Errorf("read answer after %d bytes: %w", len(data), rerr)
		}
	}
}

// parseRights returns the fds of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message of the answer: %v", ErrRefused, err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("%w: files of the answer: %v", ErrRefused, err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// parseAnswer reads an answer from the bytes received so far: done is false
// while more must come. A refusal, and an answer breaking a rule, are errors
// wrapping ErrRefused. The arguments still hold their placeholders.
func parseAnswer(data []byte) (args []string, done bool, err error) {
	if len(data) > maxAnswer {
		return nil, false, fmt.Errorf("%w: answer longer than %d bytes", ErrRefused, maxAnswer)
	}
	head, rest, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, false, nil
	}
	n, err := parseHead(string(head))
	if err != nil {
		return nil, false, err
	}
	for len(args) < n {
		line, after, ok := bytes.Cut(rest, []byte{'\n'})
		if !ok {
			if len(rest) > MaxArgLen {
				return nil, false, fmt.Errorf("%w: argument %d of the answer is longer than %d bytes", ErrRefused, len(args)+1, MaxArgLen)
			}
			return nil, false, nil
		}
		if err := checkArg(string(line)); err != nil {
			return nil, false, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		args = append(args, string(line))
		rest = after
	}
	if len(rest) > 0 {
		return nil, false, fmt.Errorf("%w: %d bytes after the answer", ErrRefused, len(rest))
	}
	return args, true, nil
}

// parseHead reads the first line of an answer: the number of argument lines
// that follow, or the server's refusal.
func parseHead(line string) (int, error) {
	if msg, ok := strings.CutPrefix(line, errorPrefix); ok {
		return 0, fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	if line == AnswerOK {
		return 0, nil
	}
	if s, ok := strings.CutPrefix(line, AnswerOK+" "); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxArgs || strconv.Itoa(n) != s {
			return 0, fmt.Errorf("%w: answer %.100q: want 1 to %d arguments", ErrRefused, line, MaxArgs)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%w: unexpected answer %.100q", ErrRefused, line)
}

// resolve checks the arguments of an answer against the files that came
// with it and replaces each placeholder with its file's number.
func resolve(args []string, fds []int) ([]string, error) {
	if err := checkAnswer(args, len(fds)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return expandAll(args, len(fds), func(i int) string { return strconv.Itoa(fds[i]) })
}

// inherit clears FD_CLOEXEC (set by Go's recvmsg) so the files reach qemu.
func inherit(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("keep file %d open across exec: %w", fd, err)
		}
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// FDPlaceholder is how an argument of an answer names the i-th file (from
// 0) sent with it: "{fd<i>}", e.g. "tap,id=net0,fd="+FDPlaceholder(0). The
// client replaces it with the file's number in its own process.
func FDPlaceholder(i int) string { return "{fd" + strconv.Itoa(i) + "}" }

// Answer is the text of the server's ok answer handing qemu args and nfds
// files, which args must all name (FDPlaceholder): "ok\n" without either,
// else "ok <n>\n" and one line per argument. An error names the rule args
// or nfds break; the server should then refuse instead.
func Answer(args []string, nfds int) (string, error) {
	if err := checkAnswer(args, nfds); err != nil {
		return "", err
	}
	if len(args) == 0 {
		return AnswerOK + "\n", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d\n", AnswerOK, len(args))
	for _, a := range args {
		b.WriteString(a)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// SendAnswer sends the ok answer handing qemu args and files (see Answer)
// with the files as SCM_RIGHTS on the same sendmsg. The files stay open:
// closing them is the caller's.
func SendAnswer(conn *net.UnixConn, args []string, files []*os.File) error {
	text, err := Answer(args, len(files))
	if err != nil {
		return err
	}
	return withFDs(files, nil, func(fds []int) error {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		n, _, err := conn.WriteMsgUnix([]byte(text), oob, nil)
		if err == nil && n < len(text) {
			// A short write: the files went with the first bytes.
			_, err = conn.Write([]byte(text[n:]))
		}
		if err != nil {
			return fmt.Errorf("send answer: %w", err)
		}
		return nil
	})
}

// withFDs calls fn with the descriptors of files (after those in fds),
// holding each file open meanwhile. Unlike (*os.File).Fd it leaves the
// files' blocking mode alone.
func withFDs(files []*os.File, fds []int, fn func(fds []int) error) error {
	if len(files) == 0 {
		return fn(fds)
	}
	i := len(fds)
	rc, err := files[0].SyscallConn()
	if err != nil {
		return fmt.Errorf("file %d of the answer: %w", i, err)
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) {
		fnErr = withFDs(files[1:], append(fds, int(fd)), fn)
	}); err != nil {
		return fmt.Errorf("file %d of the answer: %w", i, err)
	}
	return fnErr
}

// checkAnswer applies the rules of an ok answer to args handing over nfds
// files.
func checkAnswer(args []string, nfds int) error {
	if len(args) > MaxArgs {
		return fmt.Errorf("%d arguments, more than %d", len(args), MaxArgs)
	}
	if nfds < 0 || nfds > MaxFDs {
		return fmt.Errorf("%d files, more than %d", nfds, MaxFDs)
	}
	for _, a := range args {
		if err := checkArg(a); err != nil {
			return err
		}
	}
	_, err := expandAll(args, nfds, FDPlaceholder)
	return err
}

// checkArg checks one argument: one line of bounded length, no NUL (qemu's
// argv cannot hold one).
func checkArg(a string) error {
	if len(a) > MaxArgLen {
		return fmt.Errorf("argument of %d bytes is longer than %d", len(a), MaxArgLen)
	}
	if strings.ContainsAny(a, "\n\x00") {
		return fmt.Errorf("argument %.100q holds a newline or NUL", a)
	}
	return nil
}

// expandAll replaces each placeholder in args with fd(i), checking that
// each names one of nfds files and that each file is named.
func expandAll(args []string, nfds int, fd func(i int) string) ([]string, error) {
	named := make([]bool, nfds)
	var out []string
	for _, a := range args {
		e, err := expand(a, func(i int) (string, error) {
			if i >= nfds {
				return "", fmt.Errorf("argument %.100q names file %d, but %d came with the answer", a, i, nfds)
			}
			named[i] = true
			return fd(i), nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if i := slices.Index(named, false); i >= 0 {
		return nil, fmt.Errorf("file %d of the answer is named by no argument", i)
	}
	return out, nil
}

// expand replaces each placeholder "{fd<decimal>}" in arg with repl of its
// number; other text, "{fd}" and "{fdx}" included, stays as it is.
func expand(arg string, repl func(i int) (string, error)) (string, error) {
	const open = "{fd"
	var b strings.Builder
	for {
		start := strings.Index(arg, open)
		if start < 0 {
			b.WriteString(arg)
			return b.String(), nil
		}
		b.WriteString(arg[:start])
		arg = arg[start+len(open):]
		n := 0
		for n < len(arg) && '0' <= arg[n] && arg[n] <= '9' {
			n++
		}
		if n == 0 || n == len(arg) || arg[n] != '}' {
			b.WriteString(open) // not a placeholder
			continue
		}
		i, err := strconv.Atoi(arg[:n])
		if err != nil {
			return "", fmt.Errorf("placeholder %s%s} is out of range", open, arg[:n])
		}
		s, err := repl(i)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
		arg = arg[n+1:]
	}
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
