package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

// baseLayer builds the busybox base layer.
func baseLayer(tmp, deb, sysroot string) (oci.Layer, error) {
	bb, err := extractFromDeb(deb, "./bin/busybox")
	if err != nil {
		return oci.Layer{}, err
	}
	bbPath := filepath.Join(tmp, "busybox")
	if err := os.WriteFile(bbPath, bb, 0o755); err != nil {
		return oci.Layer{}, err
	}
	listing, err := exec.Command(bbPath, "--list-full").Output()
	if err != nil {
		return oci.Layer{}, fmt.Errorf("busybox --list-full: %w", err)
	}

	l := oci.NewLayer()
	addBaseDirs(l)
	if err := addBusybox(l, bb, listing); err != nil {
		return oci.Layer{}, err
	}
	if err := addSharedLibs(l, bbPath, sysroot); err != nil {
		return oci.Layer{}, err
	}
	addBaseEtc(l)
	return l.Build()
}

// addBaseDirs adds the base layer's directories.
func addBaseDirs(l *oci.LayerBuilder) {
	for _, d := range []string{"bin", "dev", "etc", "home", "lib", "lib64", "mnt", "proc", "root", "run", "sbin", "sys",
		"usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin", "var/log", "var/run", "var/spool/mail", "var/www"} {
		l.Dir(d, 0o755)
	}
	l.Dir("root", 0o700)
	l.Dir("tmp", 0o1777)
	l.Dir("var/tmp", 0o1777)
}

// addBusybox adds busybox, its applets (listing, from busybox
// --list-full) as hard links to it, and the stand-ins of the applets it
// lacks.
func addBusybox(l *oci.LayerBuilder, bb, listing []byte) error {
	l.File("bin/busybox", 0o755, bb)
	applets := 0
	for _, p := range strings.Fields(string(listing)) {
		if p == "bin/busybox" {
			continue
		}
		l.Hardlink(p, "bin/busybox")
		applets++
	}
	if applets < 100 {
		return fmt.Errorf("busybox lists only %d applets", applets)
	}
	for name, script := range map[string]string{"usr/bin/pgrep": pgrepScript, "usr/bin/ipcs": ipcsScript} {
		if l.Has(name) {
			continue // a busybox with the real applet
		}
		l.File(name, 0o755, []byte(script))
	}
	return nil
}

// addSharedLibs adds the shared libraries busybox (at bbPath) needs, taken
// from sysroot, and its dynamic loader where it looks for it.
func addSharedLibs(l *oci.LayerBuilder, bbPath, sysroot string) error {
	libs, interp, err := sharedLibs(bbPath, sysroot)
	if err != nil {
		return err
	}
	for soname, data := range libs {
		l.File("lib/x86_64-linux-gnu/"+soname, 0o755, data)
	}
	if interp != "" {
		target := "/lib/x86_64-linux-gnu/" + path.Base(interp)
		if strings.TrimPrefix(interp, "/") != strings.TrimPrefix(target, "/") {
			l.Symlink(interp, target)
		}
	}
	return nil
}

// addBaseEtc adds the base layer's /etc files.
func addBaseEtc(l *oci.LayerBuilder) {
	l.File("etc/passwd", 0o644, []byte(etcPasswd))
	l.File("etc/group", 0o644, []byte(etcGroup))
	l.File("etc/shadow", 0o640, []byte("root:*:19000:0:99999:7:::\n"))
	l.File("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"))
	l.File("etc/os-release", 0o644, []byte("NAME=\"crimux test bed busybox\"\nID=busybox\n"))
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
