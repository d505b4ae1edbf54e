package testutil

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifySocket stands in for systemd's notify socket ($NOTIFY_SOCKET): it
// keeps every datagram sent to it.
type NotifySocket struct {
	Path string
	mu   sync.Mutex
	msgs []string
}

// ListenNotify listens on path until the test ends.
func ListenNotify(t testing.TB, path string) *NotifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &NotifySocket{Path: path}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

// Next waits for a message containing want, consumes the messages up to
// it and returns it.
func (n *NotifySocket) Next(t testing.TB, want string, timeout time.Duration) string {
	t.Helper()
	var got string
	Eventually(t, timeout, "sd_notify "+want, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		for i, m := range n.msgs {
			if strings.Contains(m, want) {
				got, n.msgs = m, n.msgs[i+1:]
				return nil
			}
		}
		return fmt.Errorf("messages so far: %q", n.msgs)
	})
	return got
}

// All returns the messages not consumed yet.
func (n *NotifySocket) All() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// Drain consumes the messages so far and returns them joined by "|".
func (n *NotifySocket) Drain() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	all := strings.Join(n.msgs, "|")
	n.msgs = nil
	return all
}
