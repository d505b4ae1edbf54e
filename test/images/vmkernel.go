package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// vmKernelVersion is the release of a /boot/vmlinuz-<release> file.
func vmKernelVersion(kernel string) (string, error) {
	v, ok := strings.CutPrefix(filepath.Base(kernel), "vmlinuz-")
	if !ok || v == "" {
		return "", fmt.Errorf("%s: want a kernel named vmlinuz-<release>", kernel)
	}
	return v, nil
}

// newestCloudKernel returns the newest /boot/vmlinuz-*-cloud-amd64.
func newestCloudKernel() (string, error) {
	found, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	if len(found) == 0 {
		return "", errors.New("no /boot/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)")
	}
	sort.Slice(found, func(i, j int) bool { return versionLess(found[i], found[j]) })
	return found[len(found)-1], nil
}

// versionLess compares like sort -V, roughly: digit runs as numbers.
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := unicode.IsDigit(rune(a[0])), unicode.IsDigit(rune(b[0]))
		if da && db {
			na, ra := splitRun(a, true)
			nb, rb := splitRun(b, true)
			ia, _ := strconv.ParseUint(na, 10, 64)
			ib, _ := strconv.ParseUint(nb, 10, 64)
			if ia != ib {
				return ia < ib
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func splitRun(s string, digits bool) (string, string) {
	i := 0
	for i < len(s) && unicode.IsDigit(rune(s[i])) == digits {
		i++
	}
	return s[:i], s[i:]
}

// kmod is one kernel module, uncompressed.
type kmod struct {
	name string // as insmod names it: dashes as underscores
	data []byte
}

func modName(p string) string {
	base := filepath.Base(p)
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz", ".ko"} {
		if strings.HasSuffix(base, ext) {
			base = strings.TrimSuffix(base, ext)
			break
		}
	}
	return strings.ReplaceAll(base, "-", "_")
}

// modDep is a module's line of modules.dep: its file (relative to the
// module directory) and the modules it needs.
type modDep struct {
	path string
	deps []string
}

// readModulesDep reads modDir's modules.dep, by module name.
func readModulesDep(modDir string) (map[string]modDep, error) {
	f, err := os.Open(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mods := map[string]modDep{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p, deps, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		info := modDep{path: p}
		for _, d := range strings.Fields(deps) {
			info.deps = append(info.deps, modName(d))
		}
		mods[modName(p)] = info
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return mods, nil
}

// kernelModules returns want and their dependencies from modDir's
// modules.dep, in an order insmod can load them.
func kernelModules(modDir string, want []string) ([]kmod, error) {
	mods, err := readModulesDep(modDir)
	if err != nil {
		return nil, err
	}
	var order []kmod
	done := map[string]bool{}
	var visit func(name string, depth int) error
	visit = func(name string, depth int) error {
		if done[name] {
			return nil
		}
		info, ok := mods[name]
		if !ok {
			return fmt.Errorf("module %s is not in %s/modules.dep (built in? then drop it from the list)", name, modDir)
		}
		if depth > 32 {
			return fmt.Errorf("module dependency loop at %s", name)
		}
		// modules.dep lists the deepest dependency last, like modprobe
		// loads it first.
		for i := len(info.deps) - 1; i >= 0; i-- {
			if err := visit(info.deps[i], depth+1); err != nil {
				return err
			}
		}
		data, err := readModule(filepath.Join(modDir, info.path))
		if err != nil {
			return err
		}
		done[name] = true
		order = append(order, kmod{name: name, data: data})
		return nil
	}
	for _, m := range want {
		if err := visit(m, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// readModule reads a module, decompressing it (busybox insmod of a static
// busybox cannot be relied on to).
func readModule(p string) ([]byte, error) {
	switch {
	case strings.HasSuffix(p, ".ko"):
		return os.ReadFile(p)
	case strings.HasSuffix(p, ".ko.gz"):
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return io.ReadAll(zr)
	case strings.HasSuffix(p, ".ko.xz"), strings.HasSuffix(p, ".ko.zst"):
		tool := "xz"
		if strings.HasSuffix(p, ".zst") {
			tool = "zstd"
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out, err := toolDecompress(tool, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: not a kernel module", p)
}

// toolDecompress decompresses in with tool -dc (xz, zstd): no reader of
// xz among the Go modules here.
func toolDecompress(tool string, in io.Reader) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(tool, "-dc")
	cmd.Stdin = in
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -dc: %w (%s)", tool, err, stderr.String())
	}
	return out, nil
}

// initramfs builds the test VM's gzip-compressed initramfs.
func initramfs(tmp string, bb, dhcp6c []byte, mods []kmod) ([]byte, error) {
	bbPath := filepath.Join(tmp, "busybox-static")
	if err := os.WriteFile(bbPath, bb, 0o755); err != nil {
		return nil, err
	}
	listing, err := exec.Command(bbPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox-static --list-full: %w", err)
	}

	a := newCpio()
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "mnt", "run", "tmp", "var/log", "lib/modules"} {
		a.dir(d, 0o755)
	}
	a.dir("root", 0o700)
	a.charDev("dev/console", 0o600, 5, 1)
	a.charDev("dev/null", 0o666, 1, 3)
	a.file("bin/busybox", 0o755, bb)
	applets := 0
	for _, p := range strings.Fields(string(listing)) {
		if p == "bin/busybox" {
			continue
		}
		a.symlink(p, "/bin/busybox")
		applets++
	}
	for _, need := range []string{"bin/sh", "sbin/acpid", "sbin/insmod", "bin/cttyhack", "usr/bin/setsid", "sbin/poweroff", "bin/mount",
		"sbin/udhcpc", "usr/sbin/httpd", "usr/bin/nc", "sbin/ip"} {
		if _, ok := a.entries[need]; !ok {
			return nil, fmt.Errorf("the static busybox has no %s applet", need)
		}
	}
	var order strings.Builder
	for _, m := range mods {
		a.file("lib/modules/"+m.name+".ko", 0o644, m.data)
		order.WriteString(m.name + "\n")
	}
	a.file("lib/modules/load-order", 0o644, []byte(order.String()))
	a.file("init", 0o755, []byte(vmInit))
	a.file("etc/acpid.conf", 0o644, []byte(vmAcpidConf))
	a.file("etc/udhcpc.script", 0o755, []byte(vmUdhcpcScript))
	a.file("sbin/crimux-dhcp6c", 0o755, dhcp6c)
	a.dir("www", 0o755)
	a.file("www/index.html", 0o644, []byte(vmIndexHTML))
	a.file("etc/acpi/PWRF/00000080", 0o755, []byte(vmPowerOff))
	a.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	a.file("etc/group", 0o644, []byte("root:x:0:\n"))
	a.file("etc/os-release", 0o644, []byte("NAME=\"crimux test VM\"\nID=crimux-test-vm\n"))

	return gzipBest(a.bytes())
}

// gzipBest compresses data at gzip's best compression (an initramfs
// archive: the kernel unpacks it).
func gzipBest(data []byte) ([]byte, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}
