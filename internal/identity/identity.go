// Package identity gives a crimux instance a stable name, stamped on every
// domain, disk and cgroup it makes, so that what it made is recognised as
// its own across restarts — and across a wiped state dir, because the
// identity is derived from the node (its machine ID) and the state dir's
// path, not only read back from disk. Resources with another identity
// belong to another crimux (or an earlier one elsewhere) and are never
// touched without an operator's command.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// fileName is where the identity is kept under the state dir.
const fileName = "identity"

// machineIDPaths are read in order; the hostname is the last resort.
var machineIDPaths = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// Derive computes the identity of a crimux using stateDir on this node.
func Derive(stateDir string) string {
	node := machineID()
	sum := sha256.Sum256([]byte("crimux\x00" + node + "\x00" + filepath.Clean(stateDir)))
	return "crimux-" + hex.EncodeToString(sum[:8])
}

func machineID() string {
	for _, p := range machineIDPaths {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			return strings.TrimSpace(string(b))
		}
	}
	h, _ := os.Hostname()
	return "host:" + h
}

// Load returns the identity kept in stateDir, writing the derived one
// first if there is none. A kept identity that differs from the derived
// one wins (the node's machine ID changed, the disk moved): what crimux
// made under it is still its own.
func Load(stateDir string) (string, error) {
	p := filepath.Join(stateDir, fileName)
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("identity file %s is empty", p)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := Derive(stateDir)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, os.Rename(tmp, p)
}

// Read returns the identity kept in stateDir, or the one Load would
// derive and keep there; it writes nothing (crimuxctl store rebuild runs
// on a state dir crimux is not running on).
func Read(stateDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, fileName))
	if errors.Is(err, os.ErrNotExist) {
		return Derive(stateDir), nil
	} else if err != nil {
		return "", err
	}
	if id := strings.TrimSpace(string(b)); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("identity file %s is empty", filepath.Join(stateDir, fileName))
}
