package migration

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/crimux/crimux/vmtypes"
)

// A migration's two descriptions (the source's VM, the target's prepared
// domain and endpoint) travel between the nodes through whoever drives
// it: with kubectl crimux migrate, pod annotations a tenant can write.
// Each is sealed by the crimux that made it, with its node's client key
// (the one its libvirtd and migproxy present to peers), and opened by the
// crimux that acts on it: only a description a node of the cluster made,
// unchanged, for a pod of the same namespace, lately, is acted on. A
// forged one cannot name a host device, a host path or an emulator.

// SealMaxAge is how old a sealed description may be when it is opened:
// a migration is prepared and begun within the target timeout (10
// minutes by default), so an hour is ample.
const SealMaxAge = time.Hour

// sealSkew is how far ahead of this node's clock a peer's may be.
const sealSkew = 5 * time.Minute

// ErrSeal is why a sealed description is not acted on.
var ErrSeal = errors.New("not sealed by a node of this cluster")

// Payload is fields, each length-prefixed: no two lists of fields encode
// the same.
func Payload(fields ...string) []byte {
	var out []byte
	for _, f := range fields {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out
}

// message is what is signed: the purpose, the time and the payload.
func message(purpose string, at time.Time, payload []byte) []byte {
	return Payload(purpose, strconv.FormatInt(at.UnixNano(), 10), string(payload))
}

// Seal signs payload for purpose ("source", "target") with this node's
// client key.
func (n *Node) Seal(purpose string, payload []byte) (vmtypes.Seal, error) {
	if n == nil {
		return vmtypes.Seal{}, errOff
	}
	pair := n.client.Certificates[0]
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return vmtypes.Seal{}, fmt.Errorf("migration: the node's client key (%T) cannot sign", pair.PrivateKey)
	}
	at := time.Now().UTC()
	msg := message(purpose, at, payload)
	var sig []byte
	var err error
	if _, ed := key.Public().(ed25519.PublicKey); ed {
		sig, err = key.Sign(rand.Reader, msg, crypto.Hash(0))
	} else {
		sum := sha256.Sum256(msg)
		sig, err = key.Sign(rand.Reader, sum[:], crypto.SHA256)
	}
	if err != nil {
		return vmtypes.Seal{}, fmt.Errorf("migration: seal the %s: %w", purpose, err)
	}
	return vmtypes.Seal{Certificates: pair.Certificate, Signature: sig, SignedAt: at}, nil
}

// Open checks that s seals payload for purpose: signed by a certificate
// of this node's CA (for clients: a node's), no older than SealMaxAge.
func (n *Node) Open(purpose string, payload []byte, s vmtypes.Seal) error {
	if n == nil {
		return errOff
	}
	if len(s.Certificates) == 0 || len(s.Signature) == 0 {
		return fmt.Errorf("it is not sealed: %w", ErrSeal)
	}
	now := time.Now()
	if age := now.Sub(s.SignedAt); age > SealMaxAge || age < -sealSkew {
		return fmt.Errorf("it was sealed at %s, not within %s of now: %w", s.SignedAt.UTC().Format(time.RFC3339), SealMaxAge, ErrSeal)
	}
	leaf, err := n.verifyChain(s.Certificates, now)
	if err != nil {
		return err
	}
	if err := verifySignature(leaf.PublicKey, message(purpose, s.SignedAt, payload), s.Signature); err != nil {
		return fmt.Errorf("its signature by %s does not match it (altered, or sealed for another pod): %w", leaf.Subject, ErrSeal)
	}
	return nil
}

// verifyChain parses chain (leaf first) and verifies it against the CA.
func (n *Node) verifyChain(chain [][]byte, now time.Time) (*x509.Certificate, error) {
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("its certificate %d: %v: %w", i, err, ErrSeal)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: n.client.RootCAs, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, fmt.Errorf("its certificate (%s): %v: %w", certs[0].Subject, err, ErrSeal)
	}
	return certs[0], nil
}

// verifySignature checks sig over msg with pub, as Seal signs.
func verifySignature(pub any, msg, sig []byte) error {
	sum := sha256.Sum256(msg)
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(k, sum[:], sig) {
			return ErrSeal
		}
		return nil
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig)
	case ed25519.PublicKey:
		if !ed25519.Verify(k, msg, sig) {
			return ErrSeal
		}
		return nil
	}
	return fmt.Errorf("a %T key: %w", pub, ErrSeal)
}
