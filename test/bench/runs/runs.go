// Package runs owns how a bench run is named and the sweep that removes
// what dead runs left behind.
//
// A run is named by its state dir, /var/lib/crimux-bench-<run>: the run is
// alive while the dir exists (its cleanup removes it last). Everything
// else it makes carries the run's name — pod labels, cgroup names, domain
// names or paths, its socket — so that the sweep can remove what a run
// that died, or that lost libvirtd while cleaning up, left behind.
package runs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/ctd"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
)

const (
	// DirPrefix is the start of a run's state dir; the run's ID follows.
	DirPrefix = "/var/lib/crimux-bench-"
	// Label marks everything the bench makes with its run ID, so that
	// cleanup finds it and lists can count it among other users' pods.
	Label = "crimux-bench-run"
)

// benchPath finds a run's state dir in a domain's XML (its disks, console
// and kernel all live there or in its image cache).
var benchPath = regexp.MustCompile(regexp.QuoteMeta(DirPrefix) + `([0-9]+)/`)

func runAlive(run string) bool {
	_, err := os.Stat(DirPrefix + run)
	return err == nil
}

// Sweep removes what dead runs left: domains, their containerds (or their
// pods in the bed's, before the bench ran its own), cgroups, sockets. It
// never touches a live run's, nor anything not the bench's.
func Sweep(ctx context.Context, bed *criclient.Endpoint, logf func(string, ...any)) error {
	var errs []error
	n, err := sweepDomains()
	errs = append(errs, err)
	c, err := sweepContainerds()
	n += c
	errs = append(errs, err)
	if bed != nil {
		p, err := sweepPods(ctx, bed)
		n += p
		errs = append(errs, err)
	}
	for _, h := range cgroups.Hierarchies() {
		entries, _ := os.ReadDir(filepath.Join(h, cgroups.Root))
		for _, e := range entries {
			if run, _, ok := strings.Cut(e.Name(), "-"); ok && e.IsDir() && !runAlive(run) {
				cgroups.RemoveTree(filepath.Join(h, cgroups.Root, e.Name()))
			}
		}
		cgroups.RemoveTree(filepath.Join(h, cgroups.Direct))
		_ = os.Remove(filepath.Join(h, cgroups.Root))
	}
	socks, _ := filepath.Glob("/run/crimux-testbed/bench-*.sock")
	for _, s := range socks {
		if run := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s), "bench-"), ".sock"); !runAlive(run) {
			_ = os.Remove(s)
		}
	}
	if n > 0 {
		logf("swept %d domains and pods that earlier runs left behind", n)
	}
	return errors.Join(errs...)
}

// sweepContainerds kills the containerds of dead runs (test/bench/ctd)
// with their shims and pods.
func sweepContainerds() (int, error) {
	n := 0
	var errs []error
	for _, run := range ctd.Runs() {
		if runAlive(run) {
			continue
		}
		if c := ctd.Leftover(run); c != nil {
			errs = append(errs, c.Kill(""))
			n++
		}
	}
	return n, errors.Join(errs...)
}

func sweepDomains() (int, error) {
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(libvirtdirect.Socket)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return 0, err
	}
	defer l.Disconnect()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, d := range doms {
		run := ""
		switch {
		case strings.HasPrefix(d.Name, libvirtdirect.DomainPrefix):
			run, _, _ = strings.Cut(strings.TrimPrefix(d.Name, libvirtdirect.DomainPrefix), "-")
		case strings.HasPrefix(d.Name, "crimux-"):
			x, err := l.DomainGetXMLDesc(d, 0)
			if err != nil {
				continue
			}
			if m := benchPath.FindStringSubmatch(x); m != nil {
				run = m[1]
			}
		}
		if run == "" || runAlive(run) {
			continue
		}
		if err := libvirtdirect.DestroyDomain(l, d.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func sweepPods(ctx context.Context, ctd *criclient.Endpoint) (int, error) {
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	resp, err := ctd.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, err
	}
	var dead []string
	for _, p := range resp.GetItems() {
		if run, ok := p.GetLabels()[Label]; ok && !runAlive(run) {
			dead = append(dead, p.GetId())
		}
	}
	return len(dead), criclient.Parallel(len(dead), 6, func(i int) error { return criclient.RemovePod(ctx, ctd, dead[i]) })
}
