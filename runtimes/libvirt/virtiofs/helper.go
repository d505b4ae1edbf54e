package virtiofs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
)

// helperConfig is the helper's command line:
//
//	DIR ro|rw [--user UID:GID[:G1,G2…]] [--squash] -- VIRTIOFSD ARGS…
type helperConfig struct {
	dir      string
	readOnly bool
	// user: run virtiofsd in a user namespace whose root is this user
	// (converter/vm.ShareRights.User); nil: as root.
	user *vm.ShareUser
	// squash: every guest user acts as virtiofsd's own user.
	squash bool
	argv   []string
}

const usage = "usage: crimux %s DIR ro|rw [--user UID:GID[:GROUPS]] [--squash] -- VIRTIOFSD ARGS..."

// HelperMain is the helper (crimux HelperCommand …, helperConfig): it
// waits on fd 4 until crimux placed it, makes itself a mount namespace,
// binds DIR read-only onto itself there when asked, and execs virtiofsd
// (which gets fd 3, the listening socket) — or, for a share that acts as
// a user (--user), starts it in a user namespace and waits for it. It
// returns only on failure or with virtiofsd's exit status.
func HelperMain(args []string) int {
	cfg, err := parseHelperArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, usage+"\n%v\n", HelperCommand, err)
		return 2
	}
	if err := waitGate(os.NewFile(4, "gate")); err != nil {
		fmt.Fprintf(os.Stderr, "crimux %s: %v\n", HelperCommand, err)
		return 1
	}
	code, err := sandboxAndRun(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crimux %s: %v\n", HelperCommand, err)
	}
	return code
}

func parseHelperArgs(args []string) (helperConfig, error) {
	if len(args) < 2 || (args[1] != "ro" && args[1] != "rw") {
		return helperConfig{}, errors.New("want DIR and ro or rw")
	}
	cfg := helperConfig{dir: args[0], readOnly: args[1] == "ro"}
	rest := args[2:]
	for len(rest) > 0 && rest[0] != "--" {
		switch {
		case rest[0] == "--squash":
			cfg.squash = true
		case rest[0] == "--user" && len(rest) > 1:
			u, err := parseUser(rest[1])
			if err != nil {
				return helperConfig{}, err
			}
			cfg.user, rest = &u, rest[1:]
		default:
			return helperConfig{}, fmt.Errorf("unknown option %q", rest[0])
		}
		rest = rest[1:]
	}
	if len(rest) < 2 {
		return helperConfig{}, errors.New("want -- and virtiofsd's command line")
	}
	cfg.argv = rest[1:]
	return cfg, nil
}

// formatUser and parseUser: UID:GID[:G1,G2…].
func formatUser(u *vm.ShareUser) string {
	s := fmt.Sprintf("%d:%d", u.UID, u.GID)
	if len(u.Groups) > 0 {
		groups := make([]string, len(u.Groups))
		for i, g := range u.Groups {
			groups[i] = strconv.FormatUint(uint64(g), 10)
		}
		s += ":" + strings.Join(groups, ",")
	}
	return s
}

func parseUser(s string) (vm.ShareUser, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 {
		return vm.ShareUser{}, fmt.Errorf("--user %q: want UID:GID[:GROUPS]", s)
	}
	ids := []string{parts[0], parts[1]}
	if len(parts) == 3 {
		ids = append(ids, strings.Split(parts[2], ",")...)
	}
	var out []uint32
	for _, p := range ids {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return vm.ShareUser{}, fmt.Errorf("--user %q: %w", s, err)
		}
		out = append(out, uint32(n))
	}
	return vm.ShareUser{UID: out[0], GID: out[1], Groups: out[2:]}, nil
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

// sandboxAndRun runs on one OS thread from here on: the mount namespace
// and the seccomp filter are the thread's, and exec (or the child it
// starts) keeps them.
func sandboxAndRun(cfg helperConfig) (int, error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return 1, fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Slave: the host's mounts and changes still reach this namespace, none
	// made here reach the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return 1, fmt.Errorf("make / a slave mount: %w", err)
	}
	if cfg.readOnly {
		if err := bindReadOnly(cfg.dir); err != nil {
			return 1, err
		}
	}
	if cfg.user != nil {
		return runAsUser(cfg)
	}
	if cfg.squash {
		if err := squashIDChanges(false); err != nil {
			return 1, err
		}
	}
	return 1, unix.Exec(cfg.argv[0], cfg.argv, os.Environ())
}

// runAsUser starts virtiofsd in a user namespace whose root is cfg.user
// (its groups mapped to themselves), keeping the supplemental groups set
// here, and waits for it. The helper does its mounts as host root first
// (it can pass the directories above the share, the user may not), and
// Go makes a user namespace only for a child, hence a child.
func runAsUser(cfg helperConfig) (int, error) {
	if err := exposeForUser(cfg.dir); err != nil {
		return 1, err
	}
	u := cfg.user
	groups := make([]int, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return 1, fmt.Errorf("set supplemental groups: %w", err)
	}
	raiseNofile()
	if err := squashIDChanges(true); err != nil {
		return 1, err
	}
	gidMap := []syscall.SysProcIDMap{{ContainerID: int(u.GID), HostID: int(u.GID), Size: 1}}
	for _, g := range u.Groups {
		gidMap = append(gidMap, syscall.SysProcIDMap{ContainerID: int(g), HostID: int(g), Size: 1})
	}
	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "vhost-user")}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(u.UID), Size: 1}},
		GidMappings: gidMap,
		Credential:  &syscall.Credential{Uid: 0, Gid: u.GID, NoSetGroups: true},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), nil
		}
		return 1, fmt.Errorf("start virtiofsd as %s: %w", formatUser(u), err)
	}
	return 0, nil
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
