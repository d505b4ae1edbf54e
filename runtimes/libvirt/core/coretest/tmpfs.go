package coretest

import (
	"os"
)

// TmpfsForTests points TMPDIR, where t.TempDir makes the store, at
// /dev/shm when TMPDIR is unset and /dev/shm can be written: the store
// syncs every write to disk, tens of milliseconds a test on a disk,
// nothing on a tmpfs. Call it from TestMain, before m.Run.
func TmpfsForTests() {
	if os.Getenv("TMPDIR") != "" {
		return
	}
	dir, err := os.MkdirTemp("/dev/shm", "crimux-test-")
	if err != nil {
		return
	}
	os.Remove(dir)
	os.Setenv("TMPDIR", "/dev/shm")
}
