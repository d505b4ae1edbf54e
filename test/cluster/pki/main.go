// Command pki makes the test bed cluster's certificates, keys and
// kubeconfigs in one directory, from nothing (crypto/x509 alone, so the
// test bed needs no openssl or cfssl):
//
//	ca.crt, ca.key                  the cluster CA (10 years)
//	apiserver.crt, .key             kube-apiserver's serving certificate
//	apiserver-kubelet-client.crt    kube-apiserver → kubelet (exec, logs, port-forward)
//	sa.key, sa.pub                  service-account token signing
//	admin.kubeconfig                system:masters (the tests' kubectl)
//	kubelet.kubeconfig              system:node:<node> in system:nodes
//	crimux.kubeconfig               crimux's node agent (its own user; RBAC in test/cluster/rbac.yaml)
//	<other>/kubelet.kubeconfig,     with -other-node NAME=URL (repeatable): another node's two
//	<other>/crimux.kubeconfig       (the cgroup-v2 node VM's, the test bed's node two), for
//	                                kube-apiserver at URL
//
// Run as `go run ./test/cluster/pki -dir DIR -node NAME -server URL [-other-node NAME=URL]...`.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// identity is one client certificate and the kubeconfig that carries it.
type identity struct {
	file   string // kubeconfig (or certificate) base name
	user   string // CN
	groups []string
}

func main() {
	dir := flag.String("dir", "", "output directory")
	node := flag.String("node", "", "the kubelet's node name")
	server := flag.String("server", "https://127.0.0.1:16443", "kube-apiserver URL for the kubeconfigs")
	var others []otherNode
	flag.Func("other-node", "NAME=URL, repeatable: another node's kubelet and node agent kubeconfigs in DIR/NAME/, for kube-apiserver at URL (an IP in the serving certificate)", func(v string) error {
		o, err := parseOtherNode(v)
		if err == nil {
			others = append(others, o)
		}
		return err
	})
	flag.Parse()
	if *dir == "" || *node == "" {
		log.Fatal("pki: -dir and -node are required")
	}
	if err := run(*dir, *node, *server, others); err != nil {
		log.Fatalf("pki: %v", err)
	}
}

// otherNode is a node other than -node: its name and the URL its kubelet
// and node agent reach kube-apiserver at.
type otherNode struct {
	name, url string
	ip        net.IP
}

// parseOtherNode parses NAME=URL; NAME becomes a directory of DIR.
func parseOtherNode(v string) (otherNode, error) {
	name, raw, _ := strings.Cut(v, "=")
	u, err := url.Parse(raw)
	if err != nil || name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, ".") || net.ParseIP(u.Hostname()) == nil {
		return otherNode{}, fmt.Errorf("%q: want NAME=https://IP:PORT", v)
	}
	return otherNode{name: name, url: raw, ip: net.ParseIP(u.Hostname())}, nil
}

func run(dir, node, server string, others []otherNode) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}
	for _, o := range others {
		if !slices.ContainsFunc(ips, o.ip.Equal) {
			ips = append(ips, o.ip)
		}
	}
	ca, caKey, err := newCA()
	if err != nil {
		return err
	}
	if err := writeCert(dir, "ca", ca, caKey); err != nil {
		return err
	}
	serving, err := issue(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	if err := writeCert(dir, "apiserver", serving.cert, serving.key); err != nil {
		return err
	}
	kc, err := issue(ca, caKey, clientTemplate("kube-apiserver-kubelet-client", nil))
	if err != nil {
		return err
	}
	if err := writeCert(dir, "apiserver-kubelet-client", kc.cert, kc.key); err != nil {
		return err
	}
	if err := writeSAKey(dir); err != nil {
		return err
	}
	ids := append([]identity{{file: "admin", user: "crimux-e2e-admin", groups: []string{"system:masters"}}}, nodeIdentities(node)...)
	if err := writeKubeconfigs(dir, server, ca, caKey, ids); err != nil {
		return err
	}
	for _, o := range others {
		if err := writeOtherNode(dir, o, ca, caKey); err != nil {
			return err
		}
	}
	return nil
}

// writeOtherNode writes another node's kubelet and node agent kubeconfigs
// into DIR/NAME, for kube-apiserver at the node's URL.
func writeOtherNode(dir string, o otherNode, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	d := filepath.Join(dir, o.name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	return writeKubeconfigs(d, o.url, ca, caKey, nodeIdentities(o.name))
}

// nodeIdentities are a node's kubelet and crimux node agent.
func nodeIdentities(node string) []identity {
	return []identity{
		{file: "kubelet", user: "system:node:" + node, groups: []string{"system:nodes"}},
		{file: "crimux", user: "crimux-node-agent:" + node, groups: []string{"crimux:node-agents"}},
	}
}

// writeKubeconfigs issues each identity a client certificate and writes
// its kubeconfig for server into dir.
func writeKubeconfigs(dir, server string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ids []identity) error {
	for _, id := range ids {
		c, err := issue(ca, caKey, clientTemplate(id.user, id.groups))
		if err != nil {
			return err
		}
		if err := writeKubeconfig(filepath.Join(dir, id.file+".kubeconfig"), server, ca, c, id.user); err != nil {
			return err
		}
	}
	return nil
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "crimux-testbed-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func clientTemplate(user string, groups []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// issue signs tmpl (subject, names and usages filled in) with the CA.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	return keyPair{cert: cert, key: key}, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func writeCert(dir, name string, c *x509.Certificate, k *ecdsa.PrivateKey) error {
	kp, err := keyPEM(k)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM(c), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp, 0o600)
}

// writeSAKey writes the service-account token signing key pair.
func writeSAKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), kp, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

const kubeconfigTemplate = `apiVersion: v1
kind: Config
clusters:
- name: crimux-testbed
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: crimux-testbed
  context: {cluster: crimux-testbed, user: %s}
current-context: crimux-testbed
`

func writeKubeconfig(path, server string, ca *x509.Certificate, c keyPair, user string) error {
	kp, err := keyPEM(c.key)
	if err != nil {
		return err
	}
	b64 := base64.StdEncoding.EncodeToString
	body := fmt.Sprintf(kubeconfigTemplate, server, b64(certPEM(ca)), user, b64(certPEM(c.cert)), b64(kp), user)
	return os.WriteFile(path, []byte(body), 0o600)
}
