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
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	MaxArgs   = 128  // arguments for qemu in one answer (a NIC, up to 16 volumes)
	MaxFDs    = 32   // files sent with one answer
	MaxArgLen = 4096 // bytes of one argument
)

// maxAnswer bounds the bytes of a whole answer.
const maxAnswer = len("ok 128\n") + MaxArgs*(MaxArgLen+1)

// readChunk is how much one read of the answer asks for.
const readChunk = 4096

// ErrRefused is a refusal by the server, or an answer of it that breaks the
// protocol: retrying will not help.
var ErrRefused = errors.New("placement refused")

// The rules of an ok answer, which both sides check.

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
