package migproxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

const (
	headerMagic = "crimux-migration/1"
	// maxHeader bounds what the target reads before it knows who is
	// talking: the longest valid line is 19+33+1+maxChannel+1 bytes.
	maxHeader = 128
	// headerTimeout covers the TLS handshake and the header line: a peer
	// that connects and says nothing does not hold a goroutine for long.
	headerTimeout = 5 * time.Second
	tokenLen      = 32
	maxChannel    = 32
)

// NewToken returns a fresh migration token: 128 random bits, in hex. The
// token is what lets a connection reach a target's qemu, so it must not be
// guessable by another node of the cluster.
func NewToken() string {
	b := make([]byte, tokenLen/2)
	rand.Read(b) // never fails since Go 1.24: it crashes the program instead
	return hex.EncodeToString(b)
}

// validToken accepts exactly what NewToken makes, lowercase only, so a
// token has one spelling and the map lookup cannot be fooled by case.
func validToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validChannel keeps channel names short and plain ([a-z0-9_-]), so a
// header always fits in maxHeader and never carries a space or newline.
func validChannel(s string) bool {
	if s == "" || len(s) > maxChannel {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// shortToken is what logs show of a token: enough to follow a migration,
// not enough to reach its qemu.
func shortToken(s string) string {
	if !validToken(s) {
		return "(invalid)"
	}
	return s[:8]
}

// writeHeader writes the line that opens every carried connection.
func writeHeader(w io.Writer, token, channel string) error {
	if !validToken(token) {
		return fmt.Errorf("migration header: invalid token %q", token)
	}
	if !validChannel(channel) {
		return fmt.Errorf("migration header: invalid channel %q", channel)
	}
	_, err := io.WriteString(w, headerMagic+" "+token+" "+channel+"\n")
	return err
}

// readHeader reads and checks the header line a byte at a time: the raw
// stream follows it at once, and any read-ahead would swallow qemu's
// first bytes.
func readHeader(r io.Reader) (token, channel string, err error) {
	line, err := readLine(r)
	if err != nil {
		return "", "", err
	}
	fields := strings.Split(line, " ")
	switch {
	case len(fields) != 3:
		return "", "", fmt.Errorf("migration header: %d fields, want 3", len(fields))
	case fields[0] != headerMagic:
		return "", "", fmt.Errorf("migration header: protocol %q, want %q", fields[0], headerMagic)
	case !validToken(fields[1]):
		return "", "", errors.New("migration header: invalid token")
	case !validChannel(fields[2]):
		return "", "", fmt.Errorf("migration header: invalid channel %q", fields[2])
	}
	return fields[1], fields[2], nil
}

// readLine reads up to and without the first '\n', at most maxHeader
// bytes in all.
func readLine(r io.Reader) (string, error) {
	buf := make([]byte, 0, maxHeader)
	var b [1]byte
	for len(buf) < maxHeader {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", fmt.Errorf("migration header: read after %d bytes: %w", len(buf), err)
		}
		if b[0] == '\n' {
			return string(buf), nil
		}
		buf = append(buf, b[0])
	}
	return "", fmt.Errorf("migration header: no newline in %d bytes", maxHeader)
}
