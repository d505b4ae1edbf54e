package libvirtdirect

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PlacingEmulator is the direct path's emulator once PlaceIn was called:
// a shell script that moves itself into the direct path's cgroup, then
// runs qemu, as crimux's qemu wrapper has crimux place it before it runs
// qemu. It is rewritten only when its text changes: libvirtd probes an
// emulator again (about a second) whenever its file changes.
const PlacingEmulator = "/usr/local/lib/crimux/crimux-bench-direct-qemu"

// writePlacingEmulator writes PlacingEmulator for the cgroup.procs files
// procs.
func writePlacingEmulator(procs []string) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# The bench's direct path (test/bench/libvirtdirect): qemu in the bench's cgroup.\n")
	for _, p := range procs {
		fmt.Fprintf(&b, "echo $$ > %s || exit 1\n", p)
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
