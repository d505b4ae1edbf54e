package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/crimux/crimux/internal/landlock"
)

// A crimux VM's qemu opens nothing but its own VM's files (defence in
// depth: its guest may own it). Before exec the wrapper confines itself,
// and so the qemu it becomes, with Landlock to:
//
//   - the directory of every path its command line names (libvirt's and
//     the Placer's arguments: the VM's directory with its disk, its
//     image's layers, its sockets, its console): what crimux and libvirt
//     chose for this VM;
//   - libvirt's per-domain directories (DAC keeps each VM's subdirectory
//     its own), the devices (DAC again decides which it may open) and the
//     system's programs, libraries, firmware and configuration, read-only.
//
// Nothing else: not another VM's directory, not the node's or kubelet's
// state, not /tmp, not /proc/self/mem. So a name qemu was never given —
// the external data file or backing file a tenant writes into a disk's
// header after crimux checked it — opens nothing outside those, whatever
// the header says. DAC still applies beneath: qemu runs as the VM's own
// uid.

// systemRead are read-only to qemu: programs, libraries, firmware and
// configuration, and what the kernel reports of the host's CPUs and
// memory.
var systemRead = []string{
	"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/sys",
	"/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys", "/proc/filesystems",
}

// systemAll are qemu's to make and remove files in: libvirt's
// per-domain directories (each domain's subdirectory is its own uid's),
// hugetlbfs and shared memory, and crimux's migration sockets (a
// migration's directory is its VM's uid's; an arriving VM's qemu listens
// there, on a path libvirt gives it over its monitor, not its command
// line).
var systemAll = []string{
	"/var/lib/libvirt/qemu", "/run/libvirt/qemu", "/var/cache/libvirt/qemu", "/var/log/libvirt/qemu",
	"/dev/hugepages", "/dev/shm", "/run/crimux/migration",
}

// argPath finds absolute paths in qemu's arguments: a value after "=",
// ":" (unix:/path) or a JSON string's quote, up to the next "," or quote.
var argPath = regexp.MustCompile(`(?:^|[=:",])(/[^,"]*)`)

// confine confines this thread, and the qemu it execs, to qemuRules(argv).
// A kernel without Landlock leaves qemu unconfined, said on stderr (the
// domain's log); any other failure is returned: qemu does not start.
func confine(argv []string) error {
	abi, err := landlock.Restrict(qemuRules(argv), true)
	if err != nil {
		return fmt.Errorf("confine qemu to its VM's files: %w", err)
	}
	if abi == 0 {
		fmt.Fprintln(os.Stderr, "crimux-qemu-wrapper: this kernel has no Landlock: qemu is not confined to its VM's files")
	}
	return nil
}

// qemuRules are the Landlock rules of the qemu that argv runs.
func qemuRules(argv []string) []landlock.Rule {
	var rules []landlock.Rule
	for _, p := range systemRead {
		rules = append(rules, landlock.Rule{Path: p, Access: landlock.Read})
	}
	rules = append(rules, landlock.Rule{Path: "/dev", Access: landlock.ReadWrite})
	for _, p := range systemAll {
		rules = append(rules, landlock.Rule{Path: p, Access: landlock.All})
	}
	for _, d := range argDirs(argv) {
		rules = append(rules, landlock.Rule{Path: d, Access: landlock.All})
	}
	for _, f := range argFiles(argv) {
		rules = append(rules, landlock.Rule{Path: f, Access: landlock.ReadWrite})
	}
	return rules
}

// argPaths are the absolute paths argv names, cleaned, each once.
func argPaths(argv []string) []string {
	seen := map[string]bool{}
	var paths []string
	for _, a := range argv {
		for _, m := range argPath.FindAllStringSubmatch(a, -1) {
			if p := filepath.Clean(m[1]); p != "/" && !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	return paths
}

// argDirs are the directories of the paths argv names (a path's own
// directory, and the path itself where it is one), never one less than
// three deep ("/var/lib" holds every VM's and the node's state;
// "/var/lib/crimux" names no single VM either, but DAC keeps each VM's
// directory its own beneath it).
func argDirs(argv []string) []string {
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		if strings.Count(d, "/") < 3 || seen[d] {
			return
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	for _, p := range argPaths(argv) {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			add(p)
		}
		add(filepath.Dir(p))
	}
	return dirs
}

// argFiles are the paths argv names that are not directories (a kernel
// in /boot, a file however shallow): each is allowed alone.
func argFiles(argv []string) []string {
	var files []string
	for _, p := range argPaths(argv) {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			files = append(files, p)
		}
	}
	return files
}
