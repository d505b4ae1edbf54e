package rebuild

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// evidence is what libvirt and the state dir hold, read once.
type evidence struct {
	domains []domainEvidence // the crimux-named domains, by name
	vmDirs  []string         // the entries of <state>/vms
	podDirs []string         // the entries of <state>/pods
}

// domainEvidence is what a domain says of itself.
type domainEvidence struct {
	name    string
	running bool
	meta    vm.Metadata
	stamped bool
	// paths are the files it names: its disks' sources, its console's
	// socket and log.
	paths []string
	// dacLabels are its static DAC labels ("+uid:+gid"): the VM's own
	// identity, if it has one.
	dacLabels []string
	// err: its XML could not be read.
	err error
}

// The state dir's directories of VMs and pods (core.VMDir, vmfiles.PodsDir).
const (
	vmsDir  = "vms"
	podsDir = "pods"
)

// gather reads the crimux-named domains of l and the state dir's VM and
// pod directories. Without libvirt's list nothing can be proven.
func gather(stateDir string, l Domains) (evidence, error) {
	var ev evidence
	doms, err := l.ListAll()
	if err != nil {
		return ev, fmt.Errorf("list libvirt's domains (nothing can be proven without them): %w", err)
	}
	sort.Slice(doms, func(i, j int) bool { return doms[i].Name < doms[j].Name })
	for _, d := range doms {
		if strings.HasPrefix(d.Name, vm.DomainName("")) {
			ev.domains = append(ev.domains, readDomain(l, d))
		}
	}
	if ev.vmDirs, err = entries(filepath.Join(stateDir, vmsDir)); err != nil {
		return ev, err
	}
	ev.podDirs, err = entries(filepath.Join(stateDir, podsDir))
	return ev, err
}

func readDomain(l Domains, d virt.Domain) domainEvidence {
	e := domainEvidence{name: d.Name, running: !d.Inactive()}
	x, err := l.XML(d)
	if err != nil {
		e.err = err
		return e
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		e.err = err
		return e
	}
	e.meta, e.stamped = vm.ParseMetadata(&dom)
	e.paths = domainPaths(&dom)
	for _, l := range dom.SecLabel {
		if l.Model == "dac" && l.Type == "static" {
			e.dacLabels = append(e.dacLabels, l.Label)
		}
	}
	return e
}

// domainPaths are the files a domain names: its disks' sources (not
// their backing files) and its serial consoles' sockets and logs.
func domainPaths(d *libvirtxml.Domain) []string {
	if d.Devices == nil {
		return nil
	}
	var out []string
	add := func(p string) {
		if p != "" {
			out = append(out, filepath.Clean(p))
		}
	}
	for _, disk := range d.Devices.Disks {
		if s := disk.Source; s != nil && s.File != nil {
			add(s.File.File)
		} else if s != nil && s.Block != nil {
			add(s.Block.Dev)
		}
	}
	chardev := func(src *libvirtxml.DomainChardevSource, log *libvirtxml.DomainChardevLog) {
		if src != nil && src.UNIX != nil {
			add(src.UNIX.Path)
		}
		if log != nil {
			add(log.File)
		}
	}
	for _, s := range d.Devices.Serials {
		chardev(s.Source, s.Log)
	}
	for _, c := range d.Devices.Consoles {
		chardev(c.Source, c.Log)
	}
	return out
}

// entries lists the names in dir; none when it does not exist.
func entries(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, nil
}
