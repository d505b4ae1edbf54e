package podnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Namespaces of another crimux instance (foreign ones: Namespaces lists
// them) are touched only on an operator's command, one at a time, by
// name: AdoptNamespace makes one this instance's (the caller's collector
// then owns it), DeleteNamespace tears it down. Neither ever reaches a
// namespace of this instance.

// maxSandboxIDLen bounds the sandbox ID part of a namespace's name.
const maxSandboxIDLen = 128

// SplitNamespace splits a namespace's file name, <instance>_<sandbox ID>.
// The sandbox ID must be letters and digits only (crimux's IDs are hex).
func SplitNamespace(name string) (instance, sandboxID string, err error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", "", fmt.Errorf("namespace %q: not a file name in the netns dir", name)
	}
	instance, sandboxID, ok := strings.Cut(name, "_")
	if !ok || instance == "" || sandboxID == "" {
		return "", "", fmt.Errorf("namespace %q is not named <instance>_<sandbox ID>", name)
	}
	if len(sandboxID) > maxSandboxIDLen {
		return "", "", fmt.Errorf("namespace %q: sandbox ID is %d bytes long, more than %d", name, len(sandboxID), maxSandboxIDLen)
	}
	for _, c := range sandboxID {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return "", "", fmt.Errorf("namespace %q: sandbox ID %q has %q: want letters and digits only", name, sandboxID, c)
		}
	}
	return instance, sandboxID, nil
}

// foreignPath checks that name is an existing namespace file of another
// instance and returns its path and sandbox ID.
func (m *Manager) foreignPath(name string) (path, sandboxID string, err error) {
	inst, id, err := SplitNamespace(name)
	if err != nil {
		return "", "", err
	}
	if inst == m.cfg.Instance {
		return "", "", fmt.Errorf("namespace %q carries this crimux's identity: not foreign", name)
	}
	path = filepath.Join(m.cfg.NetnsDir, name)
	if _, err := os.Lstat(path); err != nil {
		return "", "", fmt.Errorf("namespace %q in %s: %w", name, m.cfg.NetnsDir, err)
	}
	return path, id, nil
}

// AdoptNamespace makes a foreign namespace this instance's: it is named
// <instance>_<sandbox ID> from then on (so the caller's collector owns
// it). A mounted namespace cannot be renamed (EBUSY): it is bind-mounted
// at the new name, then the old one is unmounted and removed. An
// unmounted file (its namespace is gone) is renamed.
func (m *Manager) AdoptNamespace(name string) (sandboxID string, err error) {
	old, id, err := m.foreignPath(name)
	if err != nil {
		return "", err
	}
	path := m.NetNSPath(id)
	if _, err := os.Lstat(path); err == nil {
		return "", fmt.Errorf("namespace %q: %s exists already (this instance has a namespace for sandbox %s): %w",
			name, path, id, os.ErrExist)
	}
	if !isNetNS(old) {
		if err := os.Rename(old, path); err != nil {
			return "", fmt.Errorf("adopt namespace %q: %w", name, err)
		}
		return id, nil
	}
	if err := bindNetNS(old, path); err != nil {
		return "", fmt.Errorf("adopt namespace %q: %w", name, err)
	}
	if err := removeNetNS(old); err != nil {
		return id, fmt.Errorf("namespace %q adopted as %s, but the old name stays: %w", name, path, err)
	}
	return id, nil
}

// DeleteNamespace tears a foreign namespace down: CNI DEL with the conf
// dir's current config (the config it was set up with is in the other
// instance's records), the container ID its sandbox ID, as that instance
// would have run it; then the namespace. A failed DEL leaves everything
// for another try.
func (m *Manager) DeleteNamespace(ctx context.Context, name string) error {
	path, id, err := m.foreignPath(name)
	if err != nil {
		return err
	}
	if err := m.teardownCurrent(ctx, id, path); err != nil {
		return fmt.Errorf("namespace %q: %w", name, err)
	}
	return nil
}
