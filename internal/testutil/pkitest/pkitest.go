// Package pkitest makes, for one test, a cluster CA and node key pairs
// for 127.0.0.1 in libvirt's file names (cacert.pem, servercert.pem,
// serverkey.pem, clientcert.pem, clientkey.pem): what a node's
// pkipath holds for live migration (runtimes/libvirt/migproxy).
package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a cluster CA made for one test.
type CA struct {
	Cert *x509.Certificate
	DER  []byte
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid for an hour either side of now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, DER: der, Key: key}
}

// Issue makes a node certificate for 127.0.0.1 with one extended key
// usage, as libvirt's server and client certificates have, in PEM.
func (ca *CA) Issue(t testing.TB, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// PEM is the CA's certificate in PEM.
func (ca *CA) PEM() []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER}) }

// WriteNode writes a node's pkipath signed by ca into a temporary
// directory and returns it.
func (ca *CA) WriteNode(t testing.TB) string {
	t.Helper()
	serverCert, serverKey := ca.Issue(t, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.Issue(t, x509.ExtKeyUsageClientAuth)
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"cacert.pem": ca.PEM(), "servercert.pem": serverCert, "serverkey.pem": serverKey,
		"clientcert.pem": clientCert, "clientkey.pem": clientKey,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// NodeDir is the pkipath of a node of a CA of its own: the nodes of a
// test may share it (one cluster CA).
func NodeDir(t testing.TB) string {
	t.Helper()
	return NewCA(t, "test CA").WriteNode(t)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
