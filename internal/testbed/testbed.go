// Package testbed gates the integration tests that live beside unit tests
// (they need the test bed's containerd or libvirtd, test/bed).
//
// `make unit` runs without CRIMUX_E2E and these tests skip, saying which
// target runs them; `make e2e` sets CRIMUX_E2E=1 after starting the bed,
// and then a missing prerequisite fails the test instead of skipping it,
// so an integration test never passes by not running.
package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Enabled reports whether the test bed is up and integration tests must run.
func Enabled() bool { return os.Getenv("CRIMUX_E2E") == "1" }

// Require skips t unless the bed is up (CRIMUX_E2E=1).
func Require(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skip("integration test: needs the test bed, run by `make e2e` (CRIMUX_E2E=1)")
	}
}

// Need fails t with the reason when a prerequisite of the bed is missing.
// Call it after Require.
func Need(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("test bed: %s: %v", fmt.Sprintf(what, args...), err)
	}
}

// Tool is the path of a command the bed installs (qemu-img, qemu-io):
// where it is missing the test skips, unless the bed is up, where it
// must be there.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil && !Enabled() {
		t.Skipf("%s is not installed (test/bed/install.sh installs it; make e2e runs this test)", name)
	}
	Need(t, err, "%s", name)
	return p
}
