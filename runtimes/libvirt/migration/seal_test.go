package migration

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil/pkitest"
	"github.com/crimux/crimux/vmtypes"
)

// TestSealOpens: what a node of the cluster sealed, another opens.
func TestSealOpens(t *testing.T) {
	ca := pkitest.NewCA(t, "cluster CA")
	one, two := startNode(t, ca.WriteNode(t), nil), startNode(t, ca.WriteNode(t), nil)
	payload := Payload("ns", "<domain/>", "52:54:00:00:00:01")
	s, err := one.Seal("source", payload)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	if err := two.Open("source", payload, s); err != nil {
		t.Fatalf("Open of a genuine seal: %v", err)
	}
}

// TestSealRefuses: an altered, re-purposed, unsealed, stale, foreign or
// server-only seal is refused.
func TestSealRefuses(t *testing.T) {
	ca := pkitest.NewCA(t, "cluster CA")
	one, two := startNode(t, ca.WriteNode(t), nil), startNode(t, ca.WriteNode(t), nil)
	stranger := startNode(t, pkitest.NodeDir(t), nil)
	payload := Payload("ns", "<domain/>")
	good, err := one.Seal("source", payload)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := stranger.Seal("source", payload)
	if err != nil {
		t.Fatal(err)
	}
	stale := good
	stale.SignedAt = good.SignedAt.Add(-2 * SealMaxAge)
	for _, tc := range []struct {
		name, purpose string
		payload       []byte
		seal          vmtypes.Seal
		want          string
	}{
		{"altered", "source", Payload("ns", "<domain><devices><hostdev/></devices></domain>"), good, "does not match"},
		{"another namespace", "source", Payload("other", "<domain/>"), good, "does not match"},
		{"another purpose", "target", payload, good, "does not match"},
		{"fields moved across", "source", Payload("ns<domain/>"), good, "does not match"},
		{"unsealed", "source", payload, vmtypes.Seal{}, "not sealed"},
		{"stale", "source", payload, stale, "not within"},
		{"another CA", "source", payload, foreign, "certificate"},
		{"a server certificate", "source", payload, serverSealed(t, ca, payload), "certificate"},
	} {
		err := two.Open(tc.purpose, tc.payload, tc.seal)
		if !errors.Is(err, ErrSeal) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v; want ErrSeal saying %q", tc.name, err, tc.want)
		}
	}
}

// serverSealed is payload sealed with a key whose certificate is for
// servers only: a node's client key, not any key of the CA, seals.
func serverSealed(t *testing.T, ca *pkitest.CA, payload []byte) vmtypes.Seal {
	t.Helper()
	dir := ca.WriteNode(t)
	cert, key := ca.Issue(t, x509.ExtKeyUsageServerAuth)
	for name, data := range map[string][]byte{"clientcert.pem": cert, "clientkey.pem": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := startNode(t, dir, nil).Seal("source", payload)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSealOff: a node with migration off neither seals nor opens.
func TestSealOff(t *testing.T) {
	var n *Node
	if _, err := n.Seal("source", nil); err == nil {
		t.Error("Seal on a nil node: no error")
	}
	if err := n.Open("source", nil, vmtypes.Seal{SignedAt: time.Now()}); err == nil {
		t.Error("Open on a nil node: no error")
	}
}

// TestSealKeyTypes: a node whose client key is RSA or Ed25519 seals too,
// and a node of the same CA opens it; altered, it is refused.
func TestSealKeyTypes(t *testing.T) {
	ca := pkitest.NewCA(t, "cluster CA")
	opener := startNode(t, ca.WriteNode(t), nil)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]crypto.Signer{"RSA": rsaKey, "Ed25519": edKey} {
		sealer := startNode(t, nodeWithClientKey(t, ca, key), nil)
		payload := Payload("ns", "<domain/>")
		s, err := sealer.Seal("source", payload)
		if err != nil {
			t.Fatalf("%s: Seal: %v", name, err)
		}
		if err := opener.Open("source", payload, s); err != nil {
			t.Errorf("%s: Open of a genuine seal: %v", name, err)
		}
		if err := opener.Open("source", Payload("ns", "<domain><devices/></domain>"), s); !errors.Is(err, ErrSeal) {
			t.Errorf("%s: Open of an altered description: %v; want ErrSeal", name, err)
		}
	}
}

// nodeWithClientKey is a node's pkipath of ca whose client certificate
// is for key.
func nodeWithClientKey(t *testing.T, ca *pkitest.CA, key crypto.Signer) string {
	t.Helper()
	dir := ca.WriteNode(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*pem.Block{"clientcert.pem": {Type: "CERTIFICATE", Bytes: der}, "clientkey.pem": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
