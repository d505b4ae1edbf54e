package placement

// The server side: the text of an answer, and sending it with its files.

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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
