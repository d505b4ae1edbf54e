package migproxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// File names in libvirt's pkipath, so the migration proxy trusts exactly
// the peers libvirtd trusts and needs no certificates of its own.
const (
	caFile         = "cacert.pem"
	serverCertFile = "servercert.pem"
	serverKeyFile  = "serverkey.pem"
	clientCertFile = "clientcert.pem"
	clientKeyFile  = "clientkey.pem"
)

// LoadTLS reads a node's key pairs and CA from dir, in libvirt's file names
// (cacert.pem, servercert.pem, serverkey.pem, clientcert.pem,
// clientkey.pem), the dir libvirtd's pkipath points at. The server config
// requires and verifies a client certificate against the CA, so only the
// cluster's nodes get to send a header at all; the client config verifies
// the server against the CA and the name it dials. Both ask for TLS 1.3:
// every libvirt-capable peer has it, and it leaves no weak suite to pick.
func LoadTLS(dir string) (server, client *tls.Config, err error) {
	pool, err := loadCA(filepath.Join(dir, caFile))
	if err != nil {
		return nil, nil, err
	}
	serverPair, err := loadPair(dir, serverCertFile, serverKeyFile)
	if err != nil {
		return nil, nil, err
	}
	clientPair, err := loadPair(dir, clientCertFile, clientKeyFile)
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{serverPair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{clientPair},
		RootCAs:      pool,
	}
	return server, client, nil
}

// loadCA reads the CA bundle that signs every node's certificates.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("migration TLS: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("migration TLS: no PEM certificate in %s", path)
	}
	return pool, nil
}

// loadPair reads one certificate and its key from dir.
func loadPair(dir, certFile, keyFile string) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("migration TLS: load %s and %s: %w", certPath, keyPath, err)
	}
	return pair, nil
}
