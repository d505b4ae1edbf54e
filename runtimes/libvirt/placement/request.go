package placement

// The client side: the wrapper asks to be placed and receives the
// arguments and files its qemu gets.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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
