package migproxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestClientWithoutClusterCertificateFailsHandshake(t *testing.T) {
	r := newRig(t, headerTimeout)
	token := NewToken()
	defer r.listener.Expect(token, os.Geteuid(), r.sockets)()
	roots := x509.NewCertPool()
	roots.AddCert(r.ca.Cert)
	_, foreign := node(t, newCA(t, "other"))
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":            nil,
		"certificate of another CA": foreign.Certificates,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS13}
			// In TLS 1.3 the client's handshake ends before the server has
			// checked its certificate: the refusal shows at the first read.
			err := talk(t, r.listener.Addr(), cfg, headerMagic+" "+token+" mem\n")
			if err == nil || !strings.Contains(err.Error(), "tls") {
				t.Errorf("got %v, want a TLS alert", err)
			}
			if got := r.accepted(); got != 0 {
				t.Errorf("target sockets took %d connections, want 0", got)
			}
		})
	}
}

func TestMalformedHeaderRefused(t *testing.T) {
	r := newRig(t, 300*time.Millisecond)
	token := NewToken()
	defer r.listener.Expect(token, os.Geteuid(), r.sockets)()
	_, client := node(t, r.ca)
	for name, header := range map[string]string{
		"uppercase token":     headerMagic + " " + strings.ToUpper(token) + " mem\n",
		"short token":         headerMagic + " " + token[1:] + " mem\n",
		"other protocol":      "crimux-migration/2 " + token + " mem\n",
		"no protocol":         token + " mem\n",
		"extra field":         headerMagic + " " + token + " mem x\n",
		"unexpected channel":  headerMagic + " " + token + " cpu\n",
		"crlf":                headerMagic + " " + token + " mem\r\n",
		"no newline in bound": strings.Repeat("a", 200),
		"silence":             "",
	} {
		t.Run(name, func(t *testing.T) {
			if err := talk(t, r.listener.Addr(), client, header); err == nil {
				t.Error("connection carried, want it closed")
			}
			if got := r.accepted(); got != 0 {
				t.Errorf("target sockets took %d connections, want 0", got)
			}
		})
	}
}

// talk dials the listener with cfg, writes header and reads: the error
// that ends the read, nil if bytes came back.
func talk(t *testing.T, addr string, cfg *tls.Config, header string) error {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, header); err != nil {
		return err
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		if isTimeout(err) {
			t.Fatal("connection neither carried nor closed")
		}
		return err
	}
	return nil
}

func dialUnix(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func runtimeGoroutines() int { return runtime.NumGoroutine() }

// waitFor polls cond for up to 3 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
