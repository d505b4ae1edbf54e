package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/test/bench/bigimage"
	"github.com/crimux/crimux/test/bench/stats"
)

// The import figure (durable VMs): the 1 GiB bench image's disk
// (bigimage's data, as a qcow2) imported into an empty block volume by
// crimux's code (rootvol), against qemu-img doing the same by hand. Each
// path has a loop device of its own on a sparse file, written once by an
// untimed import (a used volume: the filesystem under it allocates and
// discards nothing while timed) and emptied, as crimux sees it, by zeroing
// its first MiB before each import. Both paths end with the volume flushed
// (crimux's import mark is fsync'd; the direct path fsyncs the device): a
// loop device, not a plain file, since a volume is what crimux imports
// into. The phase needs neither the bed nor crimux's daemon:
// `-phases import` runs it alone.

const (
	// importDir keeps the source disk (made once: 10 s here) and
	// each run's volumes (run-<pid>, removed after).
	importDir    = "/var/tmp/crimux-bench"
	importSource = importDir + "/import-src-v1.qcow2"
	// importVolume is each volume's size: 1 GiB and a tenth.
	importVolume = 1126 << 20
)

// standalonePhases need neither the bed nor crimux's daemon.
var standalonePhases = map[string]bool{"import": true}

// needsDaemon says whether any selected phase needs the bed and crimux.
func needsDaemon(selected []phase) bool {
	for _, p := range selected {
		if !standalonePhases[p.name] {
			return true
		}
	}
	return false
}

var importFigures = []string{"vm_import_1g_s", "vm_import_1g_direct_s", "vm_import_1g_ratio"}

// phaseImport imports the source importRounds times each way, alternating
// which path goes first, each path into a loop device of its own.
func (b *bench) phaseImport(ctx context.Context) error {
	sweepImports()
	src, err := b.importSource(ctx)
	if err != nil {
		return fmt.Errorf("the 1 GiB source disk: %w", err)
	}
	work := filepath.Join(importDir, "run-"+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	vols := map[stats.Path]*loopVol{}
	defer func() {
		for _, v := range vols {
			v.detach()
		}
	}()
	for _, p := range []stats.Path{stats.Direct, stats.ViaCrimux} {
		if vols[p], err = newLoopVol(ctx, filepath.Join(work, p.String()+".vol")); err != nil {
			return err
		}
	}
	size, err := rootvol.DiskSize(rootVolumeOn(""), importVolume, src) // the direct path's disk: crimux's size
	if err != nil {
		return err
	}
	var flushes stats.Samples
	imports := map[stats.Path]func(context.Context, string) error{
		stats.ViaCrimux: func(ctx context.Context, dev string) error { return crimuxImport(ctx, dev, src) },
		stats.Direct: func(ctx context.Context, dev string) error {
			t, err := directImport(ctx, dev, src, size)
			flushes = append(flushes, t)
			return err
		},
	}
	if err := warmImports(ctx, src, vols, imports); err != nil {
		return err
	}
	flushes = nil
	d, c, err := stats.Alternate(b.opts.importRounds, 1, func(p stats.Path) (time.Duration, error) {
		t, err := vols[p].timeImport(ctx, imports[p])
		if err == nil {
			b.logf("import %s: %s", p, stats.Human(t))
		}
		return t, err
	})
	if err != nil {
		return err
	}
	b.recordImport(src, size, d, c, flushes)
	return nil
}

// warmImports runs each path's import once, untimed: it writes the
// volume's blocks (a used volume: no allocation in the backing file's
// filesystem while timed) and reads the source into the page cache;
// crimux's import is checked against the source.
func warmImports(ctx context.Context, src rootvol.Source, vols map[stats.Path]*loopVol, imports map[stats.Path]func(context.Context, string) error) error {
	for p, imp := range imports {
		if _, err := vols[p].timeImport(ctx, imp); err != nil {
			return fmt.Errorf("%s, untimed: %w", p, err)
		}
	}
	if err := runCmd(ctx, "qemu-img", "compare", "-q", "-f", src.Format, "-F", "qcow2", src.Path, vols[stats.ViaCrimux].dev); err != nil {
		return fmt.Errorf("crimux's import differs from the source: %w", err)
	}
	return nil
}

// recordImport sets the import figures from the timed rounds (d direct,
// c through crimux; flushes: the direct path's final fsyncs) of importing
// src into disks of size bytes.
func (b *bench) recordImport(src rootvol.Source, size int64, d, c, flushes stats.Samples) {
	b.samplesOf("VMImport1G", d, c)
	cs, ds := c.Summary(0.5, 1), d.Summary(0.5, 1)
	b.res.Set("vm_import_1g_s", c.Median().Seconds(), cs, ds)
	b.res.Set("vm_import_1g_direct_s", d.Median().Seconds(), cs, ds)
	b.res.Set("vm_import_1g_ratio", stats.MedianRatio(c, d), cs, ds)
	for _, name := range importFigures {
		b.res.Note(name, "source %s (%s allocated), disks of %d MiB on %d MiB loop devices, %d rounds per path; the direct path's final fsync: %s",
			src.Path, allocated(src.Path), size>>20, importVolume>>20, len(c), flushes.Summary(0.5))
	}
}

func rootVolumeOn(dev string) *vm.RootVolume {
	return &vm.RootVolume{ContainerPath: "/dev/xvda", HostPath: dev, Block: true, Format: vm.FormatQcow2, Field: "bench"}
}

// crimuxImport is what crimux does with an empty volume
// (rootdisk.Room.PrepareRootVolume): Capacity, Examine, DiskSize, Import.
func crimuxImport(ctx context.Context, dev string, src rootvol.Source) error {
	v := rootVolumeOn(dev)
	content, capacity, err := rootvol.Inspect(v)
	if err != nil {
		return err
	}
	if content.Holds != rootvol.Nothing {
		return fmt.Errorf("%s is not empty", dev)
	}
	size, err := rootvol.DiskSize(v, capacity, src)
	if err != nil {
		return err
	}
	return rootvol.Import(ctx, v, src, size, func(float64) {})
}

// directImport is the same by hand; it returns how long its fsync took.
func directImport(ctx context.Context, dev string, src rootvol.Source, size int64) (time.Duration, error) {
	if err := runCmd(ctx, "qemu-img", "create", "-q", "-f", "qcow2", dev, strconv.FormatInt(size, 10)); err != nil {
		return 0, err
	}
	if err := runCmd(ctx, "qemu-img", "convert", "-n", "-f", src.Format, "-O", "qcow2", src.Path, dev); err != nil {
		return 0, err
	}
	t0 := time.Now()
	err := fsyncPath(dev)
	return time.Since(t0), err
}

// loopVol is a loop device on a sparse file: a block volume.
type loopVol struct{ backing, dev string }

func newLoopVol(ctx context.Context, backing string) (*loopVol, error) {
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(backing, importVolume); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", backing).Output()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %w", backing, err)
	}
	return &loopVol{backing, strings.TrimSpace(string(out))}, nil
}

func (v *loopVol) detach() { _ = exec.Command("losetup", "-d", v.dev).Run() }

// timeImport empties the volume as crimux sees it (its first MiB zero),
// writes the host's dirty pages, then times imp on it.
func (v *loopVol) timeImport(ctx context.Context, imp func(context.Context, string) error) (time.Duration, error) {
	f, err := os.OpenFile(v.dev, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	_, err = f.WriteAt(make([]byte, 1<<20), 0)
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return 0, fmt.Errorf("emptying %s: %w", v.dev, err)
	}
	if err := runCmd(ctx, "blockdev", "--flushbufs", v.dev); err != nil {
		return 0, err
	}
	syscall.Sync()
	t0 := time.Now()
	if err := imp(ctx, v.dev); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// importSource is the source disk, made first if absent: the bench
// image's raw disk converted to a qcow2.
func (b *bench) importSource(ctx context.Context) (rootvol.Source, error) {
	if _, err := os.Stat(importSource); err != nil {
		t0 := time.Now()
		if err := os.MkdirAll(importDir, 0o755); err != nil {
			return rootvol.Source{}, err
		}
		raw, tmp := importSource+".raw.tmp", importSource+".tmp"
		defer os.Remove(raw)
		defer os.Remove(tmp)
		if err := bigimage.WriteDisk(raw); err != nil {
			return rootvol.Source{}, err
		}
		if err := runCmd(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, tmp); err != nil {
			return rootvol.Source{}, err
		}
		if err := os.Rename(tmp, importSource); err != nil {
			return rootvol.Source{}, err
		}
		b.logf("made %s in %s", importSource, stats.Human(time.Since(t0)))
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "info", "--output=json", importSource).Output()
	if err != nil {
		return rootvol.Source{}, fmt.Errorf("qemu-img info %s: %w", importSource, err)
	}
	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return rootvol.Source{}, err
	}
	return rootvol.Source{Path: importSource, Format: info.Format, VirtualSize: info.VirtualSize}, nil
}

// sweepImports detaches and removes the volumes of runs that died.
func sweepImports() {
	dirs, _ := filepath.Glob(filepath.Join(importDir, "run-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "run-"))
		if err == nil && syscall.Kill(pid, 0) == nil {
			continue // alive
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.vol"))
		for _, f := range files {
			out, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", f).Output()
			for _, dev := range strings.Fields(string(out)) {
				_ = exec.Command("losetup", "-d", dev).Run()
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func runCmd(ctx context.Context, name string, args ...string) error {
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

func fsyncPath(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// allocated is the bytes a file takes on its disk, for the report.
func allocated(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(st.Blocks*512)/(1<<20))
}
