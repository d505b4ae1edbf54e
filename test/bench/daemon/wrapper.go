package daemon

import (
	"bytes"
	"fmt"
	"os"

	"github.com/crimux/crimux/test/bench/libvirtdirect"
)

const (
	// Wrapper is crimux-qemu-wrapper built to ask PlacementSocket: the
	// bed's wrapper asks /run/crimux/placement.sock, which any other
	// crimux on the host (tests running alongside) takes over when it
	// starts, and then refuses to place the bench's VMs.
	Wrapper         = "/usr/local/lib/crimux/crimux-qemu-wrapper-bench"
	PlacementSocket = "/run/crimux-bench/placement.sock"
)

// InstallWrapper installs the bench's qemu wrapper when it changed, or
// when qemu is newer than it (libvirt caches qemu's capabilities by the
// emulator's ctime, as test/bed/libvirt-up.sh explains).
func InstallWrapper(src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("bench qemu wrapper: %w", err)
	}
	if !bytes.Contains(data, []byte(PlacementSocket)) {
		return fmt.Errorf("bench qemu wrapper %s is not built for %s (-ldflags -X main.placementSocket=%s)", src, PlacementSocket, PlacementSocket)
	}
	old, err := os.ReadFile(Wrapper)
	qemu, qerr := os.Stat(libvirtdirect.QEMUBinary)
	installed, ierr := os.Stat(Wrapper)
	if err == nil && bytes.Equal(old, data) && qerr == nil && ierr == nil && !qemu.ModTime().After(installed.ModTime()) {
		return nil
	}
	tmp := Wrapper + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("install bench qemu wrapper (make bed installs its directory): %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, Wrapper)
}
