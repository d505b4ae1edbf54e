package virtiofs

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// HelperMain is the helper (crimux HelperCommand DIR ro|rw -- VIRTIOFSD
// ARGS…): it waits on fd 4 until crimux placed it, makes itself a mount
// namespace, binds DIR read-only onto itself there when asked, and execs
// virtiofsd (which gets fd 3, the listening socket). It returns only on
// failure, with the exit status.
func HelperMain(args []string) int {
	if len(args) < 4 || args[2] != "--" || (args[1] != "ro" && args[1] != "rw") {
		fmt.Fprintf(os.Stderr, "usage: crimux %s DIR ro|rw -- VIRTIOFSD ARGS...\n", HelperCommand)
		return 2
	}
	if err := waitGate(os.NewFile(4, "gate")); err != nil {
		fmt.Fprintf(os.Stderr, "crimux %s: %v\n", HelperCommand, err)
		return 1
	}
	if err := sandboxAndExec(args[0], args[1] == "ro", args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "crimux %s: %v\n", HelperCommand, err)
	}
	return 1
}

// waitGate blocks until crimux writes gateOpen (it has placed this
// process) or gives up (EOF: crimux refused or died).
func waitGate(gate *os.File) error {
	defer gate.Close()
	_ = gate.SetReadDeadline(time.Now().Add(placeTimeout))
	line, err := bufio.NewReader(gate).ReadString('\n')
	if line != gateOpen {
		return fmt.Errorf("not released by crimux (%q, %v)", line, err)
	}
	return nil
}

// sandboxAndExec runs on one OS thread from here on: the mount namespace
// is the thread's, and exec keeps it.
func sandboxAndExec(dir string, readOnly bool, argv []string) error {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Slave: the host's mounts and changes still reach this namespace, none
	// made here reach the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if readOnly {
		if err := bindReadOnly(dir); err != nil {
			return err
		}
	}
	return unix.Exec(argv[0], argv, os.Environ())
}

// bindReadOnly binds dir onto itself and makes that mount read-only (and
// nosuid, nodev). Non-recursive: mounts below dir are not shared.
func bindReadOnly(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dir, err)
	}
	return nil
}
