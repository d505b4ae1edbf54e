package main

// VM images (KubeVirt's containerDisk layout, see runtimes/libvirt/vmimage):
// crimux/vm-busybox, a direct-boot test VM (Debian's cloud kernel, a
// busybox initramfs, a small ext4 disk), and hostile images crimux must
// refuse before qemu sees them (crimux/vm-bad-*).
//
// The expensive layers (kernel, initramfs, disk) are cached by a hash of
// their inputs under -vm-cache, so a rebuild of the images after a change
// elsewhere stays fast and reuses the very same bytes.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// vmLayerFormat versions the cached layers: bump it when a layer's recipe
// changes in a way its cache key does not see.
const vmLayerFormat = "crimux-vm-layer-v1"

// KernelArgs of the test VM: a serial console, no kernel chatter, reboot at
// once on a panic (crimux sees the VM restart instead of a hung guest).
const vmKernelArgs = "console=ttyS0 quiet panic=-1"

// The modules /init loads, with their dependencies (from modules.dep): the
// cloud kernel builds virtio, the ACPI power button and evdev (which
// busybox acpid reads) as modules. ext4 is built in.
var vmModules = []string{"virtio_pci", "virtio_blk", "virtio_net", "virtio_rng", "button", "evdev"}

// The test VM's disk: an ext4 filesystem with a marker file.
const (
	vmDiskSize     = "16M"
	vmDiskUUID     = "c71a0e5a-7e57-4d15-8b00-000000000001"
	vmDiskHashSeed = "c71a0e5a-7e57-4d15-8b00-000000000002"
	vmDiskLabel    = "crimux-disk"
	vmDiskMarker   = "disk-v1\n"
)

// vmInit is the test VM's /init. The e2e tests read these console lines:
// CRIMUX-VM-BOOTED once acpid runs (so the power button works from then
// on), CRIMUX-DISK: <marker> once /dev/vda is mounted read-write at /mnt,
// CRIMUX-UPTIME: <seconds> every 2 s; then a shell on the console.
const vmInit = `#!/bin/sh
# /init of the crimux test VM (static busybox). Never exits: PID 1 exiting
# panics the kernel.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

while read -r m; do
	insmod "/lib/modules/$m.ko" || echo "CRIMUX-WARN: insmod $m failed"
done </lib/modules/load-order
ip link set lo up 2>/dev/null

# The pod network (crimux gives the guest eth0 and serves it DHCP): once
# leased, CRIMUX-NET: <ip>/<prefix>, an HTTP responder on :8080, and,
# when the kernel command line asks with crimux.probe=<ip:port>, an HTTP
# GET there until one answers: CRIMUX-PROBE-OK: <first line of markup>
# (or CRIMUX-PROBE-FAIL after 60 tries).
if [ -e /sys/class/net/eth0 ]; then
	(
		ip link set eth0 up
		if udhcpc -i eth0 -s /etc/udhcpc.script -f -q -n -t 30 -T 1 -A 1 >/tmp/udhcpc.log 2>&1; then
			echo "CRIMUX-NET: $(cat /run/net-address)"
			httpd -p 8080 -h /www
			probe=$(sed -n 's/.*crimux\.probe=\([^ ]*\).*/\1/p' /proc/cmdline)
			if [ -n "$probe" ]; then
				i=0
				while [ $i -lt 60 ]; do
					# nc, not wget: the static busybox's wget looks the
					# port up through NSS and crashes.
					body=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "${probe%:*}" "${probe##*:}" 2>/dev/null)
					if [ -n "$body" ]; then
						echo "CRIMUX-PROBE-OK: $(echo "$body" | grep -m 1 '<')"
						break
					fi
					sleep 1
					i=$((i + 1))
				done
				[ $i -lt 60 ] || echo "CRIMUX-PROBE-FAIL: $probe"
			fi
		else
			echo "CRIMUX-NET-ERROR: no DHCP lease"
			cat /tmp/udhcpc.log
		fi
	) &
fi

# The ACPI power button (button.ko, /dev/input/event*) powers off:
# /etc/acpid.conf maps PWRF to /etc/acpi/PWRF/00000080. A press before
# acpid has opened the event devices is lost, so wait (bounded) for that:
# CRIMUX-VM-BOOTED promises a working power button.
acpid -f -c /etc/acpi -a /etc/acpid.conf -l /var/log/acpid.log </dev/null >/dev/null 2>&1 &
acpid=$!
events=$(ls /dev/input 2>/dev/null | grep -c '^event')
i=0
while [ $i -lt 100 ]; do
	[ "$(ls -l "/proc/$acpid/fd" 2>/dev/null | grep -c '/dev/input/event')" -ge "$events" ] && break
	sleep 0.05
	i=$((i + 1))
done
[ $i -lt 100 ] || echo "CRIMUX-WARN: acpid did not open the input devices"
# After a newline: the firmware leaves its last console line unterminated.
printf '\nCRIMUX-VM-BOOTED\n'

# A virtio disk: wait (bounded) for its node, mount it read-write.
hasdisk=
for d in /sys/bus/virtio/devices/*; do
	[ "$(cat "$d/device" 2>/dev/null)" = 0x0002 ] && hasdisk=1
done
if [ -n "$hasdisk" ]; then
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
if [ -b /dev/vda ]; then
	if mount -t ext4 -o rw /dev/vda /mnt; then
		echo "CRIMUX-DISK: $(cat /mnt/marker)"
	else
		echo "CRIMUX-DISK-ERROR: cannot mount /dev/vda"
	fi
fi

(
	while :; do
		read -r up rest </proc/uptime
		echo "CRIMUX-UPTIME: $up"
		sleep 2
	done
) &

# A shell on the console, with the console as its controlling tty; again
# whenever it exits.
while :; do
	setsid cttyhack sh
	sleep 1
done
`

const vmAcpidConf = "PWRF PWRF/00000080\n"

// vmUdhcpcScript configures eth0 from the lease (busybox udhcpc: $ip,
// $mask as a prefix length, $router, $dns, $mtu, $hostname).
const vmUdhcpcScript = `#!/bin/sh
case "$1" in
deconfig)
	ip -4 addr flush dev "$interface"
	;;
bound|renew)
	ip -4 addr flush dev "$interface"
	ip addr add "$ip/$mask" dev "$interface"
	[ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
	for r in $router; do ip route add default via "$r" dev "$interface"; break; done
	: >/etc/resolv.conf
	for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
	[ -n "$hostname" ] && hostname "$hostname"
	echo "$ip/$mask" >/run/net-address
	;;
esac
exit 0
`

// vmIndexHTML is what the VM's HTTP responder answers.
const vmIndexHTML = "CRIMUX-VM-HTTP\n"

const vmPowerOff = `#!/bin/sh
# ACPI power button: power off at once.
echo CRIMUX-POWEROFF >/dev/console
sync
poweroff -f
`

// vmInputs are the host files the VM images are made of.
type vmInputs struct {
	kernel, modules, busyboxStaticDeb, cache string
}

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

// layerCache keeps built layers by a hash of their inputs and forgets the
// ones a build did not use.
type layerCache struct {
	dir  string
	used map[string]bool
}

func (c *layerCache) get(key string, build func() (layer, error)) (layer, error) {
	if c.dir == "" {
		return build()
	}
	sum := sha256.Sum256([]byte(vmLayerFormat + "\n" + runtime.Version() + "\n" + key))
	name := hex.EncodeToString(sum[:])
	c.used[name] = true
	blobPath := filepath.Join(c.dir, name+".tar.gz")
	diffPath := filepath.Join(c.dir, name+".diffid")
	if data, err := os.ReadFile(blobPath); err == nil {
		if diff, err := os.ReadFile(diffPath); err == nil && strings.HasPrefix(string(diff), "sha256:") {
			return layer{blob: newBlob(mediaTypeLayerGzip, data), diffID: strings.TrimSpace(string(diff))}, nil
		}
	}
	l, err := build()
	if err != nil {
		return layer{}, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return layer{}, err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{diffPath, []byte(l.diffID + "\n")}, {blobPath, l.data}} {
		if err := writeFileAtomic(f.path, f.data); err != nil {
			return layer{}, err
		}
	}
	return l, nil
}

// prune removes the cached layers this build did not use.
func (c *layerCache) prune() error {
	if c.dir == "" {
		return nil
	}
	entries, err := os.ReadDir(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".tar.gz"), ".diffid")
		if !c.used[name] {
			if err := os.RemoveAll(filepath.Join(c.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeFileAtomic(p string, data []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func hashOf(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

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

// kernelModules returns want and their dependencies from modDir's
// modules.dep, in an order insmod can load them.
func kernelModules(modDir string, want []string) ([]kmod, error) {
	f, err := os.Open(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type modInfo struct {
		path string
		deps []string
	}
	mods := map[string]modInfo{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p, deps, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		info := modInfo{path: p}
		for _, d := range strings.Fields(deps) {
			info.deps = append(info.deps, modName(d))
		}
		mods[modName(p)] = info
	}
	if err := sc.Err(); err != nil {
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
		var stderr bytes.Buffer
		cmd := exec.Command(tool, "-dc", p)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s -dc %s: %w (%s)", tool, p, err, stderr.String())
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: not a kernel module", p)
}

// initramfs builds the test VM's gzip-compressed initramfs.
func initramfs(tmp string, bb []byte, mods []kmod) ([]byte, error) {
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
	a.dir("www", 0o755)
	a.file("www/index.html", 0o644, []byte(vmIndexHTML))
	a.file("etc/acpi/PWRF/00000080", 0o755, []byte(vmPowerOff))
	a.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	a.file("etc/group", 0o644, []byte("root:x:0:\n"))
	a.file("etc/os-release", 0o644, []byte("NAME=\"crimux test VM\"\nID=crimux-test-vm\n"))

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(a.bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
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
		if err := os.Chtimes(p, epoch, epoch); err != nil {
			return nil, err
		}
	}
	raw := filepath.Join(tmp, "disk.raw")
	qcow := filepath.Join(tmp, "disk.qcow2")
	fake := []string{fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", epoch.Unix())}
	if err := runTool(fake, "mkfs.ext4", "-q", "-F", "-t", "ext4", "-L", vmDiskLabel, "-U", vmDiskUUID,
		"-E", "hash_seed="+vmDiskHashSeed+",lazy_itable_init=0,lazy_journal_init=0,nodiscard",
		"-d", root, raw, vmDiskSize); err != nil {
		return nil, err
	}
	ts := fmt.Sprintf("@%d", epoch.Unix())
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
	p := filepath.Join(tmp, name)
	args := append([]string{"create", "-q", "-f", "qcow2"}, extra...)
	args = append(args, p, "16M")
	if err := runTool(nil, "qemu-img", args...); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

func fileSHA(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// vmImageSpecs builds the VM images' layers (through the cache) and
// returns their specs.
func vmImageSpecs(tmp string, in vmInputs) ([]imageSpec, error) {
	cache := &layerCache{dir: in.cache, used: map[string]bool{}}
	single := func(createdBy string, fill func(l *layerBuilder)) (specLayer, error) {
		lb := newLayer()
		fill(lb)
		l, err := lb.build()
		return specLayer{l, createdBy}, err
	}
	cached := func(createdBy, key string, fill func(l *layerBuilder) error) (specLayer, error) {
		l, err := cache.get(createdBy+"\n"+key, func() (layer, error) {
			lb := newLayer()
			if err := fill(lb); err != nil {
				return layer{}, err
			}
			return lb.build()
		})
		return specLayer{l, createdBy}, err
	}

	// Kernel.
	release, err := vmKernelVersion(in.kernel)
	if err != nil {
		return nil, err
	}
	kernelSum, err := fileSHA(in.kernel)
	if err != nil {
		return nil, err
	}
	kernelL, err := cached("COPY vmlinuz-"+release+" /boot/vmlinuz", hex.EncodeToString(kernelSum), func(l *layerBuilder) error {
		data, err := os.ReadFile(in.kernel)
		l.file("boot/vmlinuz", 0o644, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kernel layer: %w", err)
	}

	// Initramfs: static busybox, modules, /init.
	bb, err := extractFromDeb(in.busyboxStaticDeb, "./bin/busybox")
	if err != nil {
		return nil, err
	}
	mods, err := kernelModules(in.modules, vmModules)
	if err != nil {
		return nil, err
	}
	keyParts := [][]byte{bb, []byte(vmInit), []byte(vmAcpidConf), []byte(vmPowerOff), []byte(vmUdhcpcScript), []byte(vmIndexHTML)}
	for _, m := range mods {
		keyParts = append(keyParts, []byte(m.name), m.data)
	}
	initrdL, err := cached("COPY initrd.img /boot/initrd.img (busybox-static, virtio/button/evdev modules of "+release+", /init)",
		hashOf(keyParts...), func(l *layerBuilder) error {
			data, err := initramfs(tmp, bb, mods)
			l.file("boot/initrd.img", 0o644, data)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("initramfs layer: %w", err)
	}

	// Disk.
	var tools []string
	for _, t := range [][]string{{"mke2fs", "-V"}, {"qemu-img", "--version"}} {
		v, err := toolVersion(t[0], t[1:]...)
		if err != nil {
			return nil, err
		}
		tools = append(tools, v)
	}
	conf, _ := os.ReadFile("/etc/mke2fs.conf")
	diskKey := hashOf([]byte(strings.Join(tools, "\n")), conf,
		[]byte(strings.Join([]string{vmDiskSize, vmDiskUUID, vmDiskHashSeed, vmDiskLabel, vmDiskMarker}, "\n")))
	diskL, err := cached("COPY disk.qcow2 /disk/disk.qcow2 (ext4 "+vmDiskSize+", /marker: disk-v1)", diskKey, func(l *layerBuilder) error {
		data, err := ext4Disk(tmp)
		l.file("disk/disk.qcow2", 0o644, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("disk layer: %w", err)
	}

	// Hostile images.
	emptyL, err := single("COPY README /README", func(l *layerBuilder) {
		l.file("README", 0o644, []byte("Not a VM image: neither /disk/ nor /boot/vmlinuz.\n"))
	})
	if err != nil {
		return nil, err
	}
	secondDiskL, err := single("COPY second.raw /disk/second.raw", func(l *layerBuilder) {
		l.file("disk/second.raw", 0o644, make([]byte, 64<<10))
	})
	if err != nil {
		return nil, err
	}
	symlinkL, err := single("ln -s ../../../../../etc/shadow /boot/vmlinuz", func(l *layerBuilder) {
		l.symlink("boot/vmlinuz", "../../../../../etc/shadow")
	})
	if err != nil {
		return nil, err
	}
	backing, err := emptyQcow2(tmp, "backing.qcow2", "-F", "raw", "-b", "/dev/sda", "-u")
	if err != nil {
		return nil, err
	}
	backingL, err := single("qemu-img create -f qcow2 -F raw -b /dev/sda -u /disk/disk.qcow2 16M", func(l *layerBuilder) {
		l.file("disk/disk.qcow2", 0o644, backing)
	})
	if err != nil {
		return nil, err
	}
	plain, err := emptyQcow2(tmp, "plain.qcow2")
	if err != nil {
		return nil, err
	}
	dataFile, err := withExternalDataFile(plain, "/etc/passwd")
	if err != nil {
		return nil, err
	}
	dataFileL, err := single("qcow2 16M with external data file /etc/passwd -> /disk/disk.qcow2", func(l *layerBuilder) {
		l.file("disk/disk.qcow2", 0o644, dataFile)
	})
	if err != nil {
		return nil, err
	}
	if err := cache.prune(); err != nil {
		return nil, err
	}

	args := map[string]string{"crimux.io/kernel-args": vmKernelArgs}
	return []imageSpec{
		// The good test VM, served as a one-platform index (like KubeVirt's
		// containerdisks); the hostile ones as bare manifests.
		{id: "crimux-vm-busybox", refs: []string{"crimux/vm-busybox:latest"},
			layers: []specLayer{kernelL, initrdL, diskL}, config: containerConfig{Labels: args}, multiPlatform: true},
		{id: "crimux-vm-bad-empty", refs: []string{"crimux/vm-bad-empty:latest"}, layers: []specLayer{emptyL}},
		{id: "crimux-vm-bad-twodisks", refs: []string{"crimux/vm-bad-twodisks:latest"}, layers: []specLayer{diskL, secondDiskL}},
		{id: "crimux-vm-bad-symlink", refs: []string{"crimux/vm-bad-symlink:latest"},
			layers: []specLayer{symlinkL, initrdL}, config: containerConfig{Labels: args}},
		{id: "crimux-vm-bad-backing", refs: []string{"crimux/vm-bad-backing:latest"}, layers: []specLayer{backingL}},
		{id: "crimux-vm-bad-datafile", refs: []string{"crimux/vm-bad-datafile:latest"}, layers: []specLayer{dataFileL}},
	}, nil
}

// vmDefaults fills in the VM inputs the flags left out.
func vmDefaults(busyboxDeb string, in vmInputs) (*vmInputs, error) {
	var err error
	if in.kernel == "" {
		if in.kernel, err = newestCloudKernel(); err != nil {
			return nil, err
		}
	}
	if in.modules == "" {
		release, err := vmKernelVersion(in.kernel)
		if err != nil {
			return nil, err
		}
		in.modules = "/lib/modules/" + release
	}
	if in.busyboxStaticDeb == "" {
		found, _ := filepath.Glob(filepath.Join(filepath.Dir(busyboxDeb), "busybox-static_*.deb"))
		if len(found) == 0 {
			return nil, fmt.Errorf("no busybox-static_*.deb next to %s (apt-get download busybox-static, or -busybox-static-deb)", busyboxDeb)
		}
		sort.Slice(found, func(i, j int) bool { return versionLess(found[i], found[j]) })
		in.busyboxStaticDeb = found[len(found)-1]
	}
	switch in.cache {
	case "":
		in.cache = filepath.Join(filepath.Dir(busyboxDeb), "vm-layers")
	case "none":
		in.cache = ""
	}
	return &in, nil
}
