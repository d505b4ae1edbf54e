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
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

const (
	defaultPath   = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	standinPrefix = "github.com/crimux/crimux/test/images/standins/"
	e2e           = "e2e-test-images/"
	criTools      = "k8s-staging-cri-tools/"
)

func main() {
	out := flag.String("out", "", "output directory (replaced as a whole)")
	busyboxDeb := flag.String("busybox-deb", "", "Debian busybox .deb (dynamically linked busybox)")
	sysroot := flag.String("sysroot", "/", "where to take busybox's shared libraries from")
	withVM := flag.Bool("vm", true, "build the VM images too")
	vmKernel := flag.String("vm-kernel", "", "kernel of the VM images, /boot/vmlinuz-<release> (default: the newest /boot/vmlinuz-*-cloud-amd64)")
	vmModules := flag.String("vm-modules", "", "the kernel's module directory (default: /lib/modules/<release>)")
	busyboxStaticDeb := flag.String("busybox-static-deb", "", "Debian busybox-static .deb, for the VM initramfs (default: busybox-static_*.deb next to -busybox-deb)")
	qemuGADeb := flag.String("qemu-ga-deb", "", "Debian qemu-guest-agent .deb, for crimux/vm-busybox-agent (default: qemu-guest-agent_*.deb next to -busybox-deb)")
	guestDisk := flag.String("guest-disk", "", "the Debian guest's qcow2 (test/guest/build.sh), packaged as crimux/vm-debian; \"\" builds no such image")
	vmCache := flag.String("vm-cache", "", "cache of the VM images' kernel, initramfs and disk layers (default: vm-layers next to -busybox-deb; \"none\" for no cache)")
	flag.Parse()
	if *out == "" || *busyboxDeb == "" {
		fmt.Fprintln(os.Stderr, "usage: images -out DIR -busybox-deb FILE [-sysroot DIR] [-vm=false | -vm-kernel FILE -vm-modules DIR -busybox-static-deb FILE -vm-cache DIR]")
		os.Exit(2)
	}
	var vm *vmInputs
	if *withVM {
		var err error
		if vm, err = vmDefaults(*busyboxDeb, vmInputs{kernel: *vmKernel, modules: *vmModules, busyboxStaticDeb: *busyboxStaticDeb, qemuGADeb: *qemuGADeb, cache: *vmCache, guestDisk: *guestDisk}); err != nil {
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

// run builds every image and writes them to out, replacing it as a whole;
// it returns the number of images.
func run(out, busyboxDeb, sysroot string, vm *vmInputs) (int, error) {
	tmp, err := os.MkdirTemp("", "crimux-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)

	specs, err := allImageSpecs(tmp, busyboxDeb, sysroot, vm)
	if err != nil {
		return 0, err
	}
	staging := out + ".new"
	if err := os.RemoveAll(staging); err != nil {
		return 0, err
	}
	if err := writeLayouts(staging, specs); err != nil {
		return 0, err
	}
	return len(specs), replaceDir(out, staging)
}

// allImageSpecs builds the base layer and the stand-in programs and
// returns the specs of the container images, then of the VM images (vm
// nil: none).
func allImageSpecs(tmp, busyboxDeb, sysroot string, vm *vmInputs) ([]oci.ImageSpec, error) {
	base, err := baseLayer(tmp, busyboxDeb, sysroot)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	bins := map[string][]byte{}
	for _, name := range []string{"pause", "webserver", "nnp"} {
		if bins[name], err = goBuild(tmp, name); err != nil {
			return nil, err
		}
	}

	specs, err := imageSpecs(base, bins)
	if err != nil {
		return nil, err
	}
	if vm != nil {
		vmSpecs, err := vmImageSpecs(tmp, *vm)
		if err != nil {
			return nil, fmt.Errorf("VM images: %w", err)
		}
		specs = append(specs, vmSpecs...)
	}
	return specs, nil
}

// writeLayouts writes the images to staging, one layout per repository,
// and images.txt listing every tag with its digests.
func writeLayouts(staging string, specs []oci.ImageSpec) error {
	w := oci.NewLayoutWriter(staging)
	var listing []string
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.ID] {
			return fmt.Errorf("image id %s defined twice", s.ID)
		}
		seen[s.ID] = true
		img := oci.Build(s)
		for _, ref := range s.Refs {
			if err := w.Add(ref, img); err != nil {
				return err
			}
			listing = append(listing, fmt.Sprintf("%-58s %s %s", ref, img.Root().Digest, img.Config.Digest))
		}
	}
	if err := w.Finish(); err != nil {
		return err
	}
	sort.Strings(listing)
	header := "# repository:tag (any registry host) | digest served for the tag | image ID (config digest)\n"
	return os.WriteFile(filepath.Join(staging, "images.txt"), []byte(header+strings.Join(listing, "\n")+"\n"), 0o644)
}

// replaceDir puts staging in out's place, keeping the old out as out.old
// until staging is there.
func replaceDir(out, staging string) error {
	old := out + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(out, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(staging, out); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
