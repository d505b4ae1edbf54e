package placer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crimux/crimux/cgroup"
)

// What the Placer trusts. The caller's uid, executable and command line
// are its own to choose: a compromised qemu of VM A can run the wrapper
// as the qemu user with B's -name. What it cannot choose is its cgroup:
// its processes stay in A's, which only root may leave. So a placement is
// granted to a process that
//
//   - comes from where libvirt starts qemu: it is in the launcher's
//     (libvirtd's) cgroups, in every hierarchy, not in any pod's;
//   - starts a qemu crimux asked for: the start is in flight (granted,
//     once per start), and no qemu of that VM runs (its leaf is empty);
//
// or to the wrapper of that very VM asking again (its answer was lost):
// alone in the VM's leaf, where only this Placer can have put it.

// leafSettle is how long a placement waits for the processes of a VM's
// previous qemu to leave its leaf (a snapshot revert stops one qemu and
// starts another).
const leafSettle = 3 * time.Second

// mayPlace decides whether pid may be placed as domain.
func (p *Placer) mayPlace(l cgroup.Layout, s cgroup.Spec, domain string, pid int) error {
	others, err := leafProcs(l, s, pid)
	if err != nil {
		return err
	}
	leaf, err := l.LeafPath(s)
	if err != nil {
		return err
	}
	if own, err := p.inLeaf(pid, leaf); err == nil && own && len(others) == 0 {
		return nil // a retry: placed already
	}
	if err := p.fromLauncher(pid, domain); err != nil {
		return err
	}
	if p.granted != nil && !p.granted(domain) {
		return fmt.Errorf("crimux is not starting %s: no placement was asked for", domain)
	}
	for deadline := time.Now().Add(leafSettle); len(others) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if others, err = leafProcs(l, s, pid); err != nil {
			return err
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("a qemu of %s runs already (pids %v)", domain, others)
	}
	return nil
}

// fromLauncher checks that pid is in the launcher's cgroups, or in the
// scope systemd-machined made for this very domain (see startedFor).
func (p *Placer) fromLauncher(pid int, domain string) error {
	want, err := p.launcher()
	if err != nil {
		return fmt.Errorf("the cgroups qemu is started in: %w", err)
	}
	got, err := os.ReadFile(filepath.Join(p.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return fmt.Errorf("cgroups of pid %d: %w", pid, err)
	}
	if !startedFor(string(got), want, domain) {
		return fmt.Errorf("pid %d does not come from libvirt: its cgroups are not the ones qemu is started in", pid)
	}
	return nil
}

// startedFor tells whether a process whose /proc/<pid>/cgroup is got was
// started by libvirt for domain: in every hierarchy it is where the
// launcher (libvirtd) is, or in the scope systemd-machined made for that
// domain. With machined present (Debian's libvirt-daemon-system pulls it
// in), libvirt registers every new qemu process as a machine before it
// execs the emulator, whatever cgroup_controllers says, and systemd moves
// it to /machine.slice/machine-qemu\x2d<N>\x2d<domain>.scope: that scope
// is root's, made for this domain alone, so no other VM's qemu can be in
// it. The scope empties once the wrapper is placed, and systemd removes it.
func startedFor(got, launcher, domain string) bool {
	gotLines, wantLines := cgroupLines(got), cgroupLines(launcher)
	if len(gotLines) == 0 || len(gotLines) != len(wantLines) {
		return false
	}
	for hierarchy, path := range gotLines {
		want, ok := wantLines[hierarchy]
		if !ok || (path != want && !isMachineScope(path, domain)) {
			return false
		}
	}
	return true
}

// cgroupLines maps the hierarchies of a /proc/<pid>/cgroup file
// ("id:controllers") to the process's path in each.
func cgroupLines(content string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		i := strings.LastIndex(line, ":")
		if i < 0 {
			continue
		}
		out[line[:i]] = line[i+1:]
	}
	return out
}

// isMachineScope tells whether path is the scope systemd-machined makes for
// libvirt's machine "qemu-<N>-<domain>".
func isMachineScope(path, domain string) bool {
	rest, ok := strings.CutPrefix(path, "/machine.slice/machine-qemu\\x2d")
	if !ok {
		return false
	}
	n, rest, ok := strings.Cut(rest, "\\x2d")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return false
	}
	return rest == unitNameEscape(domain)+".scope"
}

// unitNameEscape escapes a string as systemd does for a unit name: ASCII
// letters, digits, ':', '_' and '.' (not leading) stay, '/' becomes '-',
// anything else \xNN.
func unitNameEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			b.WriteByte('-')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	return b.String()
}

// inLeaf reports whether every cgroup of pid is leaf (a path relative to
// the roots).
func (p *Placer) inLeaf(pid int, leaf string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(p.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, line := range lines {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] != leaf {
			return false, nil
		}
	}
	return len(lines) > 0, nil
}

// leafProcs lists the processes in a VM's leaf other than pid; none when
// it does not exist yet.
func leafProcs(l cgroup.Layout, s cgroup.Spec, pid int) ([]int, error) {
	dirs, err := l.LeafDirs(s)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && n != pid && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// launcherCgroups reads the cgroups of libvirt's daemon (libvirtd, or
// virtqemud of the modular daemons) from proc: the one in this process's
// mount namespace (whose /run/libvirt crimux talks to) when several run,
// as the test bed's node two runs a second libvirtd in namespaces of its
// own on the same host, each started from wherever its script ran;
// otherwise the first found (crimux in a container of its own).
func launcherCgroups(proc string) (string, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return "", err
	}
	own, _ := os.Readlink(filepath.Join(proc, "self", "ns", "mnt"))
	first, firstErr, found := "", error(nil), false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil {
			continue
		}
		if c := strings.TrimSpace(string(comm)); c != "libvirtd" && c != "virtqemud" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "cgroup"))
		if mnt, merr := os.Readlink(filepath.Join(proc, e.Name(), "ns", "mnt")); own != "" && merr == nil && mnt == own {
			if err != nil {
				return "", err
			}
			return string(b), nil
		}
		if !found {
			first, firstErr, found = string(b), err, true
		}
	}
	if !found {
		return "", errors.New("no libvirtd or virtqemud runs")
	}
	return first, firstErr
}
