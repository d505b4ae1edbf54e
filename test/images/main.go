// Command images builds the test bed's container images as OCI image
// layouts, one per repository, under -out (see test/bed/README.md). It uses
// the standard library only and its output is deterministic: the same
// inputs (this source, the Go toolchain, the busybox package and the host's
// libc) give the same digests.
//
// Every image is linux/amd64. The base layer is Debian's dynamically linked
// busybox (applets as hard links, so that masking /bin/ls works), the libc
// files it needs, a few /etc files and shell stand-ins for pgrep and ipcs.
// nginx, httpd, nonewprivs and pause are small static Go stand-ins
// (standins/...). The image names are the ones critest v1.37 uses, without
// their registry host: the test registry serves the same repository paths
// for every upstream host.
//
// Usage (from the repository root):
//
//	go run ./test/images -out /opt/crimux-testbed/images -busybox-deb busybox_*.deb
//
// The VM images (vm.go) also need Debian's cloud kernel and its modules
// (-vm-kernel, default the newest /boot/vmlinuz-*-cloud-amd64), the
// busybox-static package (-busybox-static-deb, default next to
// -busybox-deb), mke2fs, debugfs and qemu-img; -vm=false skips them.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

const (
	defaultPath   = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	standinPrefix = "github.com/crimux/crimux/test/images/standins/"
	e2e           = "e2e-test-images/"
	criTools      = "k8s-staging-cri-tools/"
)

type specLayer struct {
	layer     layer
	createdBy string
}

type imageSpec struct {
	id            string   // unique; becomes a label, so every image has its own ID
	refs          []string // repository:tag, repository without registry host
	layers        []specLayer
	config        containerConfig
	multiPlatform bool // serve an index (like upstream) rather than a bare manifest
}

func main() {
	out := flag.String("out", "", "output directory (replaced as a whole)")
	busyboxDeb := flag.String("busybox-deb", "", "Debian busybox .deb (dynamically linked busybox)")
	sysroot := flag.String("sysroot", "/", "where to take busybox's shared libraries from")
	withVM := flag.Bool("vm", true, "build the VM images too")
	vmKernel := flag.String("vm-kernel", "", "kernel of the VM images, /boot/vmlinuz-<release> (default: the newest /boot/vmlinuz-*-cloud-amd64)")
	vmModules := flag.String("vm-modules", "", "the kernel's module directory (default: /lib/modules/<release>)")
	busyboxStaticDeb := flag.String("busybox-static-deb", "", "Debian busybox-static .deb, for the VM initramfs (default: busybox-static_*.deb next to -busybox-deb)")
	vmCache := flag.String("vm-cache", "", "cache of the VM images' kernel, initramfs and disk layers (default: vm-layers next to -busybox-deb; \"none\" for no cache)")
	flag.Parse()
	if *out == "" || *busyboxDeb == "" {
		fmt.Fprintln(os.Stderr, "usage: images -out DIR -busybox-deb FILE [-sysroot DIR] [-vm=false | -vm-kernel FILE -vm-modules DIR -busybox-static-deb FILE -vm-cache DIR]")
		os.Exit(2)
	}
	var vm *vmInputs
	if *withVM {
		var err error
		if vm, err = vmDefaults(*busyboxDeb, vmInputs{kernel: *vmKernel, modules: *vmModules, busyboxStaticDeb: *busyboxStaticDeb, cache: *vmCache}); err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
	}
	n, err := run(*out, *busyboxDeb, *sysroot, vm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	fmt.Printf("images: %d images written to %s\n", n, *out)
}

func run(out, busyboxDeb, sysroot string, vm *vmInputs) (int, error) {
	tmp, err := os.MkdirTemp("", "crimux-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)

	base, err := baseLayer(tmp, busyboxDeb, sysroot)
	if err != nil {
		return 0, fmt.Errorf("base layer: %w", err)
	}
	bins := map[string][]byte{}
	for _, name := range []string{"pause", "webserver", "nnp"} {
		if bins[name], err = goBuild(tmp, name); err != nil {
			return 0, err
		}
	}

	specs, err := imageSpecs(base, bins)
	if err != nil {
		return 0, err
	}
	if vm != nil {
		vmSpecs, err := vmImageSpecs(tmp, *vm)
		if err != nil {
			return 0, fmt.Errorf("VM images: %w", err)
		}
		specs = append(specs, vmSpecs...)
	}

	staging := out + ".new"
	if err := os.RemoveAll(staging); err != nil {
		return 0, err
	}
	w := &layoutWriter{root: staging, written: map[string]string{}, tags: map[string][]descriptor{}}
	var listing []string
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.id] {
			return 0, fmt.Errorf("image id %s defined twice", s.id)
		}
		seen[s.id] = true
		img := buildImage(s)
		for _, ref := range s.refs {
			if err := w.add(ref, img); err != nil {
				return 0, err
			}
			listing = append(listing, fmt.Sprintf("%-58s %s %s", ref, img.root().digest, img.config.digest))
		}
	}
	if err := w.finish(); err != nil {
		return 0, err
	}
	sort.Strings(listing)
	header := "# repository:tag (any registry host) | digest served for the tag | image ID (config digest)\n"
	if err := os.WriteFile(filepath.Join(staging, "images.txt"), []byte(header+strings.Join(listing, "\n")+"\n"), 0o644); err != nil {
		return 0, err
	}

	old := out + ".old"
	if err := os.RemoveAll(old); err != nil {
		return 0, err
	}
	if err := os.Rename(out, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	if err := os.Rename(staging, out); err != nil {
		return 0, err
	}
	return len(specs), os.RemoveAll(old)
}

func imageSpecs(base layer, bins map[string][]byte) ([]imageSpec, error) {
	baseL := specLayer{base, "busybox (Debian, dynamic) + libc + /etc + pgrep/ipcs stand-ins"}
	shell := containerConfig{Env: []string{defaultPath}, Cmd: []string{"sh"}}

	single := func(createdBy string, fill func(l *layerBuilder)) (specLayer, error) {
		lb := newLayer()
		fill(lb)
		l, err := lb.build()
		return specLayer{l, createdBy}, err
	}

	nginxL, err := single("nginx stand-in", func(l *layerBuilder) {
		l.file("usr/sbin/nginx", 0o755, bins["webserver"])
		l.file("usr/share/nginx/html/index.html", 0o644, []byte("<h1>Welcome to nginx!</h1>\n"))
	})
	if err != nil {
		return nil, err
	}
	httpdL, err := single("httpd stand-in", func(l *layerBuilder) {
		l.file("usr/local/apache2/bin/httpd", 0o755, bins["webserver"])
		l.dir("usr/local/apache2/logs", 0o755)
		l.file("usr/local/apache2/htdocs/index.html", 0o644, []byte("<html><body><h1>It works!</h1></body></html>\n"))
	})
	if err != nil {
		return nil, err
	}
	nnpL, err := single("setuid nonewprivs stand-in", func(l *layerBuilder) {
		l.file("usr/local/bin/nnp", 0o4755, bins["nnp"])
	})
	if err != nil {
		return nil, err
	}
	pauseL, err := single("pause stand-in", func(l *layerBuilder) {
		l.file("pause", 0o755, bins["pause"])
	})
	if err != nil {
		return nil, err
	}
	groupL, err := single("adduser default-user (1000), group-defined-in-image (50000)", func(l *layerBuilder) {
		l.file("etc/passwd", 0o644, []byte(etcPasswd+"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n"))
		l.file("etc/group", 0o644, []byte(etcGroup+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"))
		l.dir("home/default-user", 0o755)
	})
	if err != nil {
		return nil, err
	}
	marker := func(name string) (specLayer, error) {
		return single("ADD "+name, func(l *layerBuilder) { l.file(name, 0o644, nil) })
	}

	nginxCfg := containerConfig{
		Env:          []string{defaultPath},
		Cmd:          []string{"nginx", "-g", "daemon off;"},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
	}
	specs := []imageSpec{
		{id: "e2e-busybox", refs: []string{e2e + "busybox:1.29-2"}, layers: []specLayer{baseL}, config: shell, multiPlatform: true},
		{id: "e2e-nginx", refs: []string{e2e + "nginx:1.14-2"}, layers: []specLayer{baseL, nginxL}, config: nginxCfg, multiPlatform: true},
		{id: "e2e-httpd", refs: []string{e2e + "httpd:2.4.39-4"}, layers: []specLayer{baseL, httpdL}, multiPlatform: true, config: containerConfig{
			Env:          []string{"PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:          []string{"/usr/local/apache2/bin/httpd", "-DFOREGROUND"},
			WorkingDir:   "/usr/local/apache2",
			ExposedPorts: map[string]struct{}{"80/tcp": {}},
		}},
		{id: "e2e-nonewprivs", refs: []string{e2e + "nonewprivs:1.3"}, layers: []specLayer{baseL, nnpL}, multiPlatform: true, config: containerConfig{
			Env:        []string{defaultPath},
			Entrypoint: []string{"/usr/local/bin/nnp"},
		}},
		{id: "pause-3.9", refs: []string{"pause:3.9"}, layers: []specLayer{pauseL}, multiPlatform: true, config: containerConfig{
			User: "65535:65535", Env: []string{defaultPath}, Entrypoint: []string{"/pause"},
		}},
		{id: "pause-3.10", refs: []string{"pause:3.10", "pause:3.10.1", "pause:3.10.2"}, layers: []specLayer{pauseL}, multiPlatform: true, config: containerConfig{
			User: "65535:65535", Env: []string{defaultPath}, Entrypoint: []string{"/pause"},
		}},
		// The host-network port-forward spec (streaming_linux.go) serves it on 12003.
		{id: "hostnet-nginx", refs: []string{criTools + "hostnet-nginx-amd64:latest"}, layers: []specLayer{baseL, nginxL}, config: containerConfig{
			Env:          []string{defaultPath, "STANDIN_LISTEN=:12003"},
			Cmd:          []string{"nginx", "-g", "daemon off;"},
			ExposedPorts: map[string]struct{}{"12003/tcp": {}},
		}},
		{id: "test-image-predefined-group", refs: []string{criTools + "test-image-predefined-group:latest"},
			layers: []specLayer{baseL, groupL}, multiPlatform: true,
			config: containerConfig{User: "1000", Env: []string{defaultPath}, Cmd: []string{"sh"}}},
		// docker.io/library/busybox, for developers' convenience.
		{id: "library-busybox", refs: []string{"library/busybox:latest", "library/busybox:1.37.0"}, layers: []specLayer{baseL}, config: shell, multiPlatform: true},
		// Our own e2e tests pull 127.0.0.1:5117/crimux/busybox:latest (a bare manifest, no index).
		{id: "crimux-busybox", refs: []string{"crimux/busybox:latest"}, layers: []specLayer{baseL}, config: shell},
	}

	// Test images built upstream by `ADD $TEST $TEST` on busybox: one marker file each.
	for _, m := range []struct {
		id, file string
		refs     []string
	}{
		{"test-image-1", "test-image-1", []string{"test-image-1:latest"}},
		{"test-image-2", "test-image-2", []string{"test-image-2:latest"}},
		{"test-image-3", "test-image-3", []string{"test-image-3:latest"}},
		{"test-image-latest", "test-image-latest", []string{"test-image-latest:latest"}},
		{"test-image-digest", "test-image-digest", []string{"test-image-digest:latest"}},
		{"test-image-tags", "same-image", []string{"test-image-tags:1", "test-image-tags:2", "test-image-tags:3"}},
		{"test-image-tag-test", "test", []string{"test-image-tag:test"}},
		{"test-image-tag-all", "all", []string{"test-image-tag:all"}},
	} {
		l, err := marker(m.file)
		if err != nil {
			return nil, err
		}
		var refs []string
		for _, r := range m.refs {
			refs = append(refs, criTools+r)
		}
		specs = append(specs, imageSpec{id: m.id, refs: refs, layers: []specLayer{baseL, l}, config: shell, multiPlatform: true})
	}

	// Test images built upstream by `USER $USER` on busybox.
	for _, u := range []struct{ name, user string }{
		{"test-image-user-uid", "1002"},
		{"test-image-user-username", "www-data"},
		{"test-image-user-uid-group", "1003:1004"},
		{"test-image-user-username-group", "www-data:1004"},
	} {
		specs = append(specs, imageSpec{
			id: u.name, refs: []string{criTools + u.name + ":latest"}, layers: []specLayer{baseL}, multiPlatform: true,
			config: containerConfig{User: u.user, Env: []string{defaultPath}, Cmd: []string{"sh"}},
		})
	}
	return specs, nil
}

const etcPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const etcGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`

// pgrep and ipcs are not in Debian's busybox; critest calls
// `sh -c "pgrep sleep || true"` and `ipcs -m`.
const pgrepScript = `#!/bin/sh
# crimux test bed stand-in for pgrep(1): prints the pids of processes whose
# name (/proc/PID/comm) matches the extended regular expression $1.
[ $# -ge 1 ] || { echo "usage: pgrep PATTERN" >&2; exit 2; }
status=1
for d in /proc/[0-9]*; do
	pid=${d#/proc/}
	[ "$pid" = "$$" ] && continue
	read -r comm < "$d/comm" 2>/dev/null || continue
	if echo "$comm" | grep -qE -- "$1"; then
		echo "$pid"
		status=0
	fi
done
exit $status
`

const ipcsScript = `#!/bin/sh
# crimux test bed stand-in for ipcs(1): lists the System V shared memory
# segments of the caller's IPC namespace (from /proc/sysvipc/shm).
case "${1:--m}" in
-m|-a) ;;
*) echo "ipcs (stand-in): only -m is supported" >&2; exit 1 ;;
esac
echo
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch     status"
[ -r /proc/sysvipc/shm ] || exit 0
tail -n +2 /proc/sysvipc/shm | while read -r key shmid perms size cpid lpid nattch uid rest; do
	printf '%-10s %-10s %-10s %-10s %-10s %-10s\n' "$key" "$shmid" "$uid" "$perms" "$size" "$nattch"
done
echo
`

// baseLayer builds the busybox base layer.
func baseLayer(tmp, deb, sysroot string) (layer, error) {
	bb, err := extractFromDeb(deb, "./bin/busybox")
	if err != nil {
		return layer{}, err
	}
	bbPath := filepath.Join(tmp, "busybox")
	if err := os.WriteFile(bbPath, bb, 0o755); err != nil {
		return layer{}, err
	}
	listing, err := exec.Command(bbPath, "--list-full").Output()
	if err != nil {
		return layer{}, fmt.Errorf("busybox --list-full: %w", err)
	}

	l := newLayer()
	for _, d := range []string{"bin", "dev", "etc", "home", "lib", "lib64", "mnt", "proc", "root", "run", "sbin", "sys",
		"usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin", "var/log", "var/run", "var/spool/mail", "var/www"} {
		l.dir(d, 0o755)
	}
	l.dir("root", 0o700)
	l.dir("tmp", 0o1777)
	l.dir("var/tmp", 0o1777)

	l.file("bin/busybox", 0o755, bb)
	applets := 0
	for _, p := range strings.Fields(string(listing)) {
		if p == "bin/busybox" {
			continue
		}
		l.hardlink(p, "bin/busybox")
		applets++
	}
	if applets < 100 {
		return layer{}, fmt.Errorf("busybox lists only %d applets", applets)
	}
	for name, script := range map[string]string{"usr/bin/pgrep": pgrepScript, "usr/bin/ipcs": ipcsScript} {
		if _, ok := l.entries[name]; ok {
			continue // a busybox with the real applet
		}
		l.file(name, 0o755, []byte(script))
	}

	libs, interp, err := sharedLibs(bbPath, sysroot)
	if err != nil {
		return layer{}, err
	}
	for soname, data := range libs {
		l.file("lib/x86_64-linux-gnu/"+soname, 0o755, data)
	}
	if interp != "" {
		target := "/lib/x86_64-linux-gnu/" + path.Base(interp)
		if strings.TrimPrefix(interp, "/") != strings.TrimPrefix(target, "/") {
			l.symlink(interp, target)
		}
	}

	l.file("etc/passwd", 0o644, []byte(etcPasswd))
	l.file("etc/group", 0o644, []byte(etcGroup))
	l.file("etc/shadow", 0o640, []byte("root:*:19000:0:99999:7:::\n"))
	l.file("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"))
	l.file("etc/os-release", 0o644, []byte("NAME=\"crimux test bed busybox\"\nID=busybox\n"))
	return l.build()
}

// extractFromDeb returns one file of a .deb's data archive, read through
// dpkg-deb (the data archive is usually xz-compressed, which the standard
// library cannot read).
func extractFromDeb(deb, name string) ([]byte, error) {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dpkg-deb: %w", err)
	}
	var found []byte
	tr := tar.NewReader(stdout)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return nil, fmt.Errorf("reading %s: %w (%s)", deb, err, stderr.String())
		}
		if hdr.Name == name && hdr.Typeflag == tar.TypeReg {
			if found, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w (%s)", deb, err, stderr.String())
	}
	if found == nil {
		return nil, fmt.Errorf("%s has no %s", deb, name)
	}
	return found, nil
}

// libResolver finds the ELF dependencies of a binary (DT_NEEDED,
// recursively, and the program interpreter) in a sysroot's multiarch
// library directories.
type libResolver struct {
	sysroot string
	libs    map[string][]byte // by soname
	paths   map[string]string // soname -> resolved host path
}

var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64"}

// sharedLibs returns the libraries bin needs, by soname, and its
// interpreter's path.
func sharedLibs(bin, sysroot string) (map[string][]byte, string, error) {
	r := &libResolver{sysroot: sysroot, libs: map[string][]byte{}, paths: map[string]string{}}
	f, err := elf.Open(bin)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, "", err
			}
			interp = strings.TrimRight(string(data), "\x00")
		}
	}
	if interp != "" {
		if err := r.load(path.Base(interp)); err != nil {
			return nil, "", err
		}
	}
	if err := r.visit(f); err != nil {
		return nil, "", err
	}
	return r.libs, interp, nil
}

func (r *libResolver) visit(f *elf.File) error {
	needed, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	for _, soname := range needed {
		if _, done := r.libs[soname]; done {
			continue
		}
		if err := r.load(soname); err != nil {
			return err
		}
		lib, err := elf.Open(r.paths[soname])
		if err != nil {
			return err
		}
		err = r.visit(lib)
		lib.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *libResolver) load(soname string) error {
	if _, done := r.libs[soname]; done {
		return nil
	}
	for _, d := range libDirs {
		real, err := filepath.EvalSymlinks(filepath.Join(r.sysroot, d, soname))
		if err != nil {
			continue
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		r.libs[soname] = data
		r.paths[soname] = real
		return nil
	}
	return fmt.Errorf("shared library %s not found under %s", soname, r.sysroot)
}

// goBuild builds one stand-in statically and reproducibly.
func goBuild(tmp, name string) ([]byte, error) {
	outFile := filepath.Join(tmp, name)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", outFile, standinPrefix+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOAMD64=v1", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", name, err, stderr.String())
	}
	return os.ReadFile(outFile)
}
