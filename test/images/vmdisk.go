package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

// The test VM's disk: an ext4 filesystem with a marker file.
const (
	vmDiskSize     = "16M"
	vmDiskUUID     = "c71a0e5a-7e57-4d15-8b00-000000000001"
	vmDiskHashSeed = "c71a0e5a-7e57-4d15-8b00-000000000002"
	vmDiskLabel    = "crimux-disk"
	vmDiskMarker   = "disk-v1\n"
)

// toolVersion is the first line of a tool's version output (a cache key
// part: another mkfs may lay the filesystem out otherwise).
func toolVersion(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w (%s)", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first, nil
}

func runTool(env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// ext4Disk makes the test VM's disk: a small ext4 filesystem holding
// /marker, as qcow2 (no backing file, no data file). Deterministic with
// e2fsprogs 1.47 (fixed UUID, hash seed and times; debugfs fixes the one
// inode time mkfs takes from the source file's ctime); cached anyway.
func ext4Disk(tmp string) ([]byte, error) {
	root := filepath.Join(tmp, "disk-root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	marker := filepath.Join(root, "marker")
	if err := os.WriteFile(marker, []byte(vmDiskMarker), 0o644); err != nil {
		return nil, err
	}
	for _, p := range []string{marker, root} {
		if err := os.Chtimes(p, oci.Epoch, oci.Epoch); err != nil {
			return nil, err
		}
	}
	raw := filepath.Join(tmp, "disk.raw")
	qcow := filepath.Join(tmp, "disk.qcow2")
	fake := []string{fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", oci.Epoch.Unix())}
	if err := runTool(fake, "mkfs.ext4", "-q", "-F", "-t", "ext4", "-L", vmDiskLabel, "-U", vmDiskUUID,
		"-E", "hash_seed="+vmDiskHashSeed+",lazy_itable_init=0,lazy_journal_init=0,nodiscard",
		"-d", root, raw, vmDiskSize); err != nil {
		return nil, err
	}
	ts := fmt.Sprintf("@%d", oci.Epoch.Unix())
	for _, field := range []string{"ctime", "atime", "mtime", "crtime"} {
		if err := runTool(fake, "debugfs", "-w", "-R", "set_inode_field /marker "+field+" "+ts, raw); err != nil {
			return nil, err
		}
	}
	if err := runTool(nil, "e2fsck", "-f", "-n", raw); err != nil {
		return nil, err
	}
	if err := runTool(nil, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, qcow); err != nil {
		return nil, err
	}
	return os.ReadFile(qcow)
}

// emptyQcow2 makes an empty 16 MiB qcow2, with extra qemu-img create
// arguments (e.g. a backing file).
func emptyQcow2(tmp, name string, extra ...string) ([]byte, error) {
	return sizedQcow2(tmp, name, "16M", extra...)
}

// sizedQcow2 is an empty qcow2 declaring a disk of size (qemu-img's
// syntax: 16M, 1P).
func sizedQcow2(tmp, name, size string, extra ...string) ([]byte, error) {
	p := filepath.Join(tmp, name)
	args := append([]string{"create", "-q", "-f", "qcow2"}, extra...)
	args = append(args, p, size)
	if err := runTool(nil, "qemu-img", args...); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// haltingDisk is a 1 MiB disk whose boot sector halts the CPU for good
// (cli; hlt; jmp back to hlt): SeaBIOS boots it and the guest never gets
// further, as a guest hung in its firmware or boot loader looks.
func haltingDisk(tmp string) ([]byte, error) {
	raw := make([]byte, 1<<20)
	copy(raw, []byte{0xfa, 0xf4, 0xeb, 0xfd})
	raw[510], raw[511] = 0x55, 0xaa
	rawPath, qcow := filepath.Join(tmp, "halting.raw"), filepath.Join(tmp, "halting.qcow2")
	if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
		return nil, err
	}
	if err := runTool(nil, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", rawPath, qcow); err != nil {
		return nil, err
	}
	return os.ReadFile(qcow)
}
