package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/runtimes/libvirt/store/rebuild"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

const storeRebuildWhat = `Rebuilds crimux's VM store (<state_dir>/vm.db) when crimux refuses to start on it
because it is damaged (or it is gone). Run it while crimux is stopped; it talks to libvirtd
and reads the state dir, not to crimux.

The damaged store is moved aside (vm.db.damaged-<time>), never deleted. The new store holds
each VM pod whose libvirt domain and directories prove it: a domain named for its container,
stamped with this state dir's crimux identity and the pod's IDs and names, using its VM's
directory, whose VM and pod record copies (vms/<id>/container.json, pods/<id>/sandbox.json)
name the same IDs, pod, directory, root disk and identity. Everything else is listed with
why and left as it is: nothing is adopted that is not proven, nothing is deleted. Each
line left alone also says what crimux does with it once it runs, as with anything it has
no record of (a running domain of its identity is adopted bare and kubelet makes its pod
again; a stopped one, and VM and pod directories without a record, are removed; another
identity's domain is never touched): copy aside what you want to keep first.

A store crimux can read, or one written by a newer crimux, is refused and left as it is.`

// dialLibvirt connects to the libvirtd of uri.
func dialLibvirt(uri string) (rebuild.Domains, func() error, error) {
	l, closeConn, err := virt.Dial(uri)
	return l, closeConn, err
}

const storeUsage = `Usage: crimuxctl store rebuild [flags]

Commands:
  rebuild    with crimux stopped: rebuild a damaged VM store from libvirt's
             domains and the state dir

Run "crimuxctl store rebuild --help" for its flags.
`

func (c *cli) storeRebuild(args []string) error {
	fs := newFlagSet(c, "store rebuild", "", storeRebuildWhat)
	cfgPath := fs.String("config", config.DefaultPath, "crimux's config file: its state_dir and [libvirt] uri are the defaults of the flags below")
	stateDir := fs.String("state-dir", "", "crimux's state dir (default: the config's state_dir)")
	uri := fs.String("libvirt-uri", "", "libvirtd's URI (default: the config's [libvirt] uri)")
	dry := fs.Bool("dry-run", false, "say what would be rebuilt and left alone; change nothing")
	noDeadline(fs, "store rebuild talks to libvirtd, not to crimux")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	if err := c.checkOutput(); err != nil {
		return err
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	cfg, err := config.Load(*cfgPath, explicit)
	if err != nil {
		return err
	}
	opts := rebuild.Options{StateDir: or(*stateDir, cfg.StateDir), DryRun: *dry}
	l, closeConn, err := c.libvirt(or(*uri, cfg.Libvirt.URI))
	if err != nil {
		return err
	}
	defer closeConn()
	rep, err := rebuild.Run(opts, l)
	if rep != nil && c.machineReadable() {
		if perr := c.printJSON(rep); perr != nil {
			return perr
		}
	} else if rep != nil {
		printRebuild(c.stdout, rep)
	}
	return err
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// printRebuild tells what a rebuild did, item by item, then in one line.
func printRebuild(w io.Writer, rep *rebuild.Report) {
	verb := "rebuilt"
	if rep.DryRun {
		verb = "would rebuild"
		fmt.Fprintln(w, "dry run: nothing is changed")
	}
	if rep.Damage != "" {
		fmt.Fprintf(w, "store %s is damaged: %s\n", rep.Store, rep.Damage)
	} else {
		fmt.Fprintf(w, "store %s does not exist\n", rep.Store)
	}
	if rep.MovedTo != "" {
		fmt.Fprintf(w, "moved the damaged store to %s\n", rep.MovedTo)
	}
	for _, s := range rep.Sandboxes {
		fmt.Fprintf(w, "%s pod sandbox %s (%s): %s\n", verb, s.ID, s.Pod, s.State)
	}
	for _, c := range rep.Containers {
		fmt.Fprintf(w, "%s container %s (%s): %s\n", verb, c.ID, c.Pod, c.State)
	}
	for _, l := range rep.LeftAlone {
		fmt.Fprintf(w, "left alone: %s %s: %s; once crimux runs: %s\n", l.Kind, l.Name, l.Why, l.Then)
	}
	fmt.Fprintf(w, "%s %d sandboxes, %d containers; %d left alone\n", verb, len(rep.Sandboxes), len(rep.Containers), len(rep.LeftAlone))
}
