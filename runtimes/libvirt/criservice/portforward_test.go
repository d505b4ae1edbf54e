package criservice

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// TestDialGuestFallsBack: the pod IP first; when nothing answers there
// (a guest listening on IPv6 alone), the pod's next address.
func TestDialGuestFallsBack(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	conn, err := dialGuest(context.Background(), []string{"127.0.0.1", "::1"}, int32(port))
	if err != nil {
		t.Fatalf("dial 127.0.0.1 then ::1 port %d: %v", port, err)
	}
	if got := conn.RemoteAddr().(*net.TCPAddr).IP.String(); got != "::1" {
		t.Fatalf("connected to %s, want ::1", got)
	}
	conn.Close()
	if _, err := dialGuest(context.Background(), []string{"127.0.0.1"}, int32(port)); err == nil {
		t.Fatalf("dial 127.0.0.1:%s succeeded with nothing listening", strconv.Itoa(port))
	}
}
