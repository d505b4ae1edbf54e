package libvirtdirect

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PlacingEmulator is the direct path's emulator once PlaceIn was called:
// a shell script that makes a cgroup of its own below the direct path's,
// moves itself there, then runs qemu, as crimux's qemu wrapper has crimux
// place it in its pod's cgroup before it runs qemu. It is rewritten only when its text changes: libvirtd probes an
// emulator again (about a second) whenever its file changes.
const PlacingEmulator = "/usr/local/lib/crimux/crimux-bench-direct-qemu"

// writePlacingEmulator writes PlacingEmulator for the cgroup directories
// dirs.
func writePlacingEmulator(dirs []string) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# The bench's direct path (test/bench/libvirtdirect): qemu in a cgroup of its own.\n")
	for _, d := range dirs {
		fmt.Fprintf(&b, "mkdir -p %[1]s/qemu-$$ && echo $$ > %[1]s/qemu-$$/cgroup.procs || exit 1\n", d)
	}
	fmt.Fprintf(&b, "exec %s \"$@\"\n", QEMUBinary)
	if old, err := os.ReadFile(PlacingEmulator); err == nil && bytes.Equal(old, []byte(b.String())) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(PlacingEmulator), 0o755); err != nil {
		return err
	}
	tmp := PlacingEmulator + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, PlacingEmulator)
}
